import { defineConfig } from "vitest/config";

export default defineConfig({
  // The app serves these files itself (tauri://localhost); there is no dev server in the loop.
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // The CSP allows fonts and images from 'self' only: never inline assets as data: URLs
    // (KaTeX's smallest fonts would otherwise be inlined into its CSS and blocked).
    assetsInlineLimit: 0,
    target: "safari16",
    // Two pages: the main window, and the quick-ask window (src/quick, docs/QUICK_ASK.md).
    rollupOptions: { input: { main: "index.html", quick: "quick.html" } },
  },
  clearScreen: false,
  test: {
    environment: "happy-dom",
    include: ["src/**/*.test.ts"],
    // The window's stylesheet is read as text by the layout tests (chat-pane.test.ts).
    css: { include: [/styles\.css/] },
  },
});
