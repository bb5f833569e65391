/** Loaded on demand (dynamic import) the first time a message contains math: KaTeX, its CSS and fonts. */
import "katex/dist/katex.min.css";

export { renderToString } from "katex";
