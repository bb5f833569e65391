"""Security and offline proofs in the real window (issue 7).

* Hostile markdown stored in a conversation (written into the chats database while the app is
  closed, so it reaches the page the way every stored answer does) renders inert.
* The CSP blocks inline script, eval and remote loads; the capabilities refuse every command
  that is not the app's own; the webview does not navigate away from the bundled UI.
* The webview loads nothing but the bundled app.
* The test itself runs with no network but loopback (run.sh puts it in a network namespace).

Each check also proves that it can see what it looks for (a positive control), so a check that
passes because it saw nothing fails instead.
"""

from __future__ import annotations

import errno
import socket
import sqlite3
import time
import uuid
from pathlib import Path

from harness import TestFailure, check
from webdriver import Session

# Every payload that could run code sets this global (or opens an alert).
SENTINEL = "__xssRan"
RUN = f"window.{SENTINEL}=1"

XSS_TITLE = f'<img src=x onerror="{RUN}"> Hostile corpus'

# Model output crafted to run code, load things, navigate, or restyle the app.
XSS_CORPUS: dict[str, str] = {
    "script tag": f"<script>{RUN}</script>",
    "remote script": "Hello <script src=https://evil.example/x.js></script> world",
    "img onerror": f'<img src=x onerror="{RUN}">',
    "svg onload": f'<svg onload="{RUN}"><script>{RUN}</script><a xlink:href="javascript:{RUN}">x</a></svg>',
    "svg animate": f'<svg><animate onbegin="{RUN}" attributeName="x" dur="1s"/></svg>',
    "iframe srcdoc": f'<iframe srcdoc="<script>parent.{SENTINEL}=1</script>"></iframe>',
    "iframe javascript": f'<iframe src="javascript:parent.{SENTINEL}=1"></iframe>',
    "object and embed": f'<object data="javascript:{RUN}"></object><embed src="https://evil.example/x.swf">',
    "details ontoggle": f'<details open ontoggle="{RUN}">x</details>',
    "autofocus onfocus": f'<input autofocus onfocus="{RUN}">',
    "style tag": "<style>body { display: none }</style>",
    "css import": "<style>@import url(https://evil.example/x.css);</style>",
    "style attribute": '<div style="background:url(https://evil.example/bg.png);position:fixed;inset:0">x</div>',
    "meta refresh": '<meta http-equiv="refresh" content="0;url=https://evil.example/">',
    "base tag": '<base href="https://evil.example/">',
    "form": f'<form action="https://evil.example"><input name="q"><button formaction="javascript:{RUN}">go</button></form>',
    "raw anchor": f'<a href="javascript:{RUN}">click</a>',
    "javascript link": f"[click](javascript:{RUN})",
    "mixed-case javascript link": f"[click](JaVaScRiPt:{RUN})",
    "entity-encoded javascript link": f"[click](&#106;avascript:{RUN})",
    "percent-encoded javascript link": f"[click](%6Aavascript:{RUN})",
    "tab inside scheme": f"[click](java\tscript:{RUN})",
    "data link": "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "vbscript link": "[click](vbscript:msgbox(1))",
    "file link": "[click](file:///etc/passwd)",
    "reference-style javascript link": f"[click][evil]\n\n[evil]: javascript:{RUN}",
    "javascript autolink": f"<javascript:{RUN}>",
    "data autolink": f"<data:text/html,<script>{RUN}</script>>",
    "image with javascript src": f"![x](javascript:{RUN})",
    "remote tracking image": "![pixel](https://evil.example/track.png)",
    "attribute breakout in title": f'[x](https://example.com "t\\" onmouseover=\\"{RUN}")',
    "attribute breakout in url": f'[x](https://example.com/"onmouseover="{RUN})',
    "html entities": f"&lt;script&gt;{RUN}&lt;/script&gt; &#60;img src=x onerror={RUN}&#62;",
    "code fence with markup": f"```html\n<script>{RUN}</script>\n<img src=x onerror={RUN}>\n```",
    "code fence info breakout": f'```js" onmouseover="{RUN}\nx\n```',
    "mutation xss": f"<math><mtext><table><mglyph><style><img src=x onerror={RUN}></style></mglyph></table></mtext></math>",
    "math href": f"$\\href{{javascript:{RUN}}}{{click}}$",
    "math html extensions": f"$\\htmlStyle{{background:url(https://evil.example)}}{{x}} \\htmlData{{onclick={RUN}}}{{y}}$",
    "math color injection": "$\\color{red;background:url(https://evil.example/)}{x}$",
    "thinking block": f"<|channel>thought <img src=x onerror={RUN}> [t](javascript:{RUN})<channel|>Done.",
    "safe link": "Read [the docs](https://example.com/docs) first.",
}

# Where the bundled app and its IPC live (Linux/macOS and Windows), and the inline schemes it uses.
BUNDLED_ORIGINS = ["tauri://localhost", "http://tauri.localhost", "https://tauri.localhost",
                   "ipc://localhost", "http://ipc.localhost"]
INLINE_SCHEMES = ("data:", "blob:")


def from_bundle(url: str) -> bool:
    return url.startswith(INLINE_SCHEMES) or any(url == o or url.startswith(o + "/") for o in BUNDLED_ORIGINS)


def check_offline() -> None:
    """This process (and so the app it starts) has no network interface but loopback."""
    interfaces = sorted(name for _, name in socket.if_nameindex())
    check(interfaces == ["lo"], f"the test is not isolated from the network: interfaces {interfaces}")
    try:
        socket.create_connection(("1.1.1.1", 443), timeout=3).close()
        raise TestFailure("a connection to 1.1.1.1:443 succeeded inside the offline namespace")
    except OSError as err:
        check(err.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH),
              f"connecting out failed for another reason than an unreachable network: {err}")


def write_hostile_conversation(db: Path) -> tuple[str, int]:
    """Adds a conversation whose answers are the corpus to the (closed) chats database.

    Returns its id and how many messages it holds. Each payload is one assistant answer after a
    user message that names it (user text is shown as plain text, so it carries the payload too).
    """
    check(db.is_file(), f"no chats database at {db}")
    conversation = str(uuid.uuid4())
    now = int(time.time() * 1000)
    rows = []
    for name, payload in XSS_CORPUS.items():
        rows.append(("user", f"{name}: {payload}", "complete", None))
        rows.append(("assistant", payload, "complete", None))
    rows.append(("assistant", f"<img src=x onerror={RUN}> partial", "stopped", None))
    rows.append(("assistant", "", "error", f"<img src=x onerror={RUN}> failed"))
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO conversations (id, title, created_at, updated_at) "
            "VALUES (?, ?, ?, (SELECT COALESCE(MAX(updated_at), 0) + 1 FROM conversations))",
            (conversation, XSS_TITLE, now),
        )
        # One branch: each message follows the one before it (`parent_id`), as the app writes them.
        ids = [str(uuid.uuid4()) for _ in rows]
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, position, role, text, status, error, created_at, "
            "parent_id, chosen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(ids[i], conversation, i, role, text, status, error, now, ids[i - 1] if i else None, i + 1)
             for i, (role, text, status, error) in enumerate(rows)],
        )
    return conversation, len(rows)


def watch_violations(s: Session) -> None:
    """Starts recording CSP violation reports in the page (read with `violations`)."""
    s.execute(
        "window.__violations = [];"
        "document.addEventListener('securitypolicyviolation', e =>"
        " window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));"
    )


def violations(s: Session) -> list[str]:
    return s.execute("return window.__violations || null") or []


# Everything in the document that could run, load or navigate, as (what, detail) pairs.
DOM_AUDIT = r"""
const found = [];
const origins = arguments[0];
const fromBundle = (url) => /^(data|blob):/.test(url) || origins.some((o) => url === o || url.startsWith(o + '/'));
for (const el of document.querySelectorAll('*')) {
  for (const attr of el.attributes) {
    const name = attr.name.toLowerCase();
    if (name.startsWith('on')) found.push(['handler', `${el.tagName} ${name}`]);
    if (['href', 'src', 'xlink:href', 'action', 'formaction', 'data', 'srcdoc', 'background', 'poster'].includes(name)
        && /^\s*(javascript|vbscript|data:text|file)/i.test(attr.value)) found.push(['unsafe url', `${el.tagName} ${name}=${attr.value}`]);
    if (name === 'style' && /url|expression|@import/i.test(attr.value)) found.push(['style', `${el.tagName} ${attr.value}`]);
  }
}
for (const el of document.querySelectorAll('script')) {
  if (!el.src || !fromBundle(el.src) || el.textContent.trim()) found.push(['script', el.src || el.textContent.slice(0, 80)]);
}
for (const el of document.querySelectorAll('link[href]')) if (!fromBundle(el.href)) found.push(['link', el.href]);
for (const el of document.querySelectorAll('iframe, frame, object, embed, base, meta[http-equiv], style'))
  found.push(['element', el.outerHTML.slice(0, 120)]);
for (const el of document.querySelectorAll('.message-body :is(img, image, form, input, textarea, select, button:not(.code-copy))'))
  found.push(['element in a message', el.outerHTML.slice(0, 120)]);
for (const a of document.querySelectorAll('.message-body a')) {
  const href = a.getAttribute('href') || '';
  if (!/^(https?:\/\/|mailto:)/i.test(href)) found.push(['link', href]);
}
for (const svg of document.querySelectorAll('.message-body svg')) if (!svg.closest('.katex')) found.push(['svg', svg.outerHTML.slice(0, 120)]);
return found;
"""


def check_inert(s: Session, expected_messages: int) -> dict[str, object]:
    """The hostile conversation is on screen, rendered, and nothing in it ran or loads."""
    texts = s.execute(
        "return [...document.querySelectorAll('[data-testid=message] .message-body')].map(b => b.innerText)"
    )
    check(len(texts) == expected_messages, f"{len(texts)} messages rendered, expected {expected_messages}")
    # Rendered, not dropped: raw HTML shows as text, and the safe link is a link.
    joined = "\n".join(texts)
    check(f"<script>{RUN}</script>" in joined, "the script-tag payload is not shown as literal text")
    check(f'<img src=x onerror="{RUN}">' in joined, "the img-onerror payload is not shown as literal text")
    safe = s.execute("return [...document.querySelectorAll('.message-body a')].map(a => a.getAttribute('href'))")
    check("https://example.com/docs" in safe, f"the safe link did not render as a link (links: {safe})")
    problems = s.execute(DOM_AUDIT, BUNDLED_ORIGINS)
    check(not problems, f"live markup from hostile content: {problems}")
    check(s.execute(f"return window.{SENTINEL} === undefined"), "a payload ran: the sentinel global is set")
    alert = s.alert_text()
    check(alert is None, f"a payload opened an alert: {alert!r}")
    page = s.execute("return {href: location.href, display: getComputedStyle(document.body).display,"
                     " app: getComputedStyle(document.getElementById('app')).display}")
    check(from_bundle(page["href"]), f"the page navigated to {page['href']}")
    check(page["display"] != "none" and page["app"] == "grid", f"hostile CSS restyled the app: {page}")
    seen = violations(s)
    check(not seen, f"hostile content reached the CSP (the sanitizer let it through): {seen}")
    return {"links": safe, "messages": len(texts)}


CSP_PROBE = r"""
const done = arguments[arguments.length - 1];
const result = {};
const s = document.createElement('script');
s.textContent = 'window.__cspInline = 1';
document.head.append(s);
result.inlineScript = window.__cspInline === 1 ? 'ran' : 'blocked';
try { eval('window.__cspEval = 1'); result.eval = 'ran'; } catch (e) { result.eval = e.name; }
try { new Function('window.__cspFunction = 1')(); result.function = 'ran'; } catch (e) { result.function = e.name; }
const d = document.createElement('div');
d.setAttribute('onclick', 'window.__cspHandler = 1');
document.body.append(d);
d.click();
d.remove();
result.inlineHandler = window.__cspHandler === 1 ? 'ran' : 'blocked';
const load = (el, attr, url) => new Promise((resolve) => {
  el.onload = () => resolve('loaded');
  el.onerror = () => resolve('blocked');
  el[attr] = url;
  if (el.tagName !== 'IMG') document.head.append(el);
  setTimeout(() => resolve('no answer'), 5000);
});
const link = document.createElement('link');
link.rel = 'stylesheet';
Promise.all([
  fetch('https://example.com/').then(() => 'loaded', (e) => e.name),
  load(new Image(), 'src', 'https://example.com/pixel.png'),
  load(document.createElement('script'), 'src', 'https://example.com/x.js'),
  load(link, 'href', 'https://example.com/x.css'),
]).then(([fetched, image, script, style]) => {
  Object.assign(result, {fetch: fetched, image, script, style});
  setTimeout(() => done(result), 300);  // violation reports are dispatched asynchronously
});
"""


def check_csp(s: Session) -> dict[str, str]:
    """Inline script, inline handlers, eval and remote loads are blocked, and the CSP says so."""
    watch_violations(s)
    result = s.execute_async(CSP_PROBE, timeout=30)
    check(result["inlineScript"] == "blocked", f"an inline script ran: {result}")
    check(result["inlineHandler"] == "blocked", f"an inline event handler ran: {result}")
    check(result["eval"] == "EvalError", f"eval was not refused with an EvalError: {result}")
    check(result["function"] == "EvalError", f"new Function was not refused with an EvalError: {result}")
    for what in ("fetch", "image", "script", "style"):
        check(result[what] != "loaded", f"a remote {what} loaded: {result}")
    seen = violations(s)
    directives = {entry.split()[0] for entry in seen}
    for directive in ("script-src", "connect-src", "img-src", "style-src"):
        check(any(d.startswith(directive) for d in directives), f"no CSP report for {directive}: {seen}")
    check(any("example.com" in entry for entry in seen if entry.startswith("connect-src")),
          f"the remote fetch was not refused by the CSP: {seen}")
    return result


CAPABILITY_PROBE = r"""
const done = arguments[arguments.length - 1];
const invoke = window.__TAURI_INTERNALS__.invoke;
const attempt = (cmd, args) => invoke(cmd, args).then(
  (v) => ({cmd, ok: true, detail: JSON.stringify(v).slice(0, 160)}),
  (e) => ({cmd, ok: false, detail: String(typeof e === 'object' ? JSON.stringify(e) : e).slice(0, 240)}));
Promise.all(arguments[0].map(([cmd, args]) => attempt(cmd, args))).then(done);
"""

# Commands the window must not reach: core plugins outside the capability, the plugins the app
# registers only for its own Rust code, and plugins it does not have at all.
REFUSED = [
    ("plugin:opener|open_url", {"url": "https://example.com/"}),
    ("plugin:opener|open_path", {"path": "/etc/passwd"}),
    ("plugin:dialog|open", {"options": {"directory": False, "multiple": False}}),
    ("plugin:dialog|message", {"message": "hi"}),
    ("plugin:fs|read_text_file", {"path": "/etc/passwd"}),
    ("plugin:shell|execute", {"program": "sh", "args": ["-c", "id"]}),
    ("plugin:shell|open", {"path": "https://example.com/"}),
    ("plugin:http|fetch", {"clientConfig": {"url": "https://example.com/", "method": "GET"}}),
    ("plugin:webview|create_webview_window", {"options": {"label": "evil", "url": "https://example.com/"}}),
    ("plugin:window|set_title", {"value": "pwned", "label": "main"}),
    ("plugin:path|resolve_directory", {"directory": 1}),
    ("plugin:app|version", {}),
]


def check_capabilities(s: Session) -> list[dict[str, object]]:
    """Every command outside the capability is refused; the app's own command still answers."""
    answers = s.execute_async(CAPABILITY_PROBE, [["app_status", {}], *[list(c) for c in REFUSED]], timeout=30)
    own, refused = answers[0], answers[1:]
    check(own["ok"], f"the app's own command app_status failed from the page: {own}")
    allowed = [a for a in refused if a["ok"]]
    check(not allowed, f"commands outside the capability were allowed: {allowed}")
    vague = [a for a in refused if not any(w in a["detail"] for w in ("not allowed", "not found", "denied"))]
    check(not vague, f"commands failed for some other reason than being refused: {vague}")
    title = s.title()
    check(title == "Gemma Desk", f"the window title changed to {title!r}")
    return refused


def check_no_navigation(s: Session) -> None:
    """Neither a script nor window.open takes the webview (or a new one) to a remote page."""
    before = s.execute("return location.href")
    handles = s.window_handles()
    s.execute("location.href = 'https://example.com/'; return true")
    time.sleep(1.5)
    opened = s.execute("const w = window.open('https://example.com/'); return w === null ? null : String(w.location)")
    time.sleep(1.5)
    after = s.execute("return location.href")
    check(after == before, f"the webview navigated from {before} to {after}")
    check(s.find('[data-testid="model-status"]') is not None, "the app's page is gone after a navigation attempt")
    check(len(s.window_handles()) == len(handles), f"window.open made a window (it returned {opened!r})")


ORIGIN_PROBE = r"""
const entries = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
const dom = [...document.querySelectorAll('script[src], link[href], img[src]')].map((el) => el.src || el.href);
const sheets = [...document.styleSheets].map((sheet) => sheet.href).filter(Boolean);
return {entries: entries.map((e) => e.name), dom, sheets, href: location.href};
"""


def start_origin_log(s: Session) -> None:
    """Keeps every resource timing entry of this run (the default buffer holds 250)."""
    s.execute("performance.setResourceTimingBufferSize(1000000)")


def check_bundled_origin(s: Session) -> int:
    """Everything this run of the webview loaded came from the bundled app. Returns the count."""
    seen = s.execute(ORIGIN_PROBE)
    urls = [seen["href"], *seen["entries"], *seen["dom"], *seen["sheets"]]
    foreign = sorted({url for url in urls if not from_bundle(url)})
    check(not foreign, f"the webview loaded from outside the app: {foreign}")
    check(any(u.endswith(".js") for u in seen["dom"]) and seen["sheets"],
          f"the bundled script and stylesheet are not visible to the check: {seen}")
    return len(urls)
