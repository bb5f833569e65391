import { defineConfig } from "vitest/config";

export default defineConfig({
  // The app serves these files itself (tauri://localhost); there is no dev server in the loop.
  build: {
    outDir: "dist",
    emptyOutDir: true,
  },
  clearScreen: false,
  test: {
    environment: "happy-dom",
    include: ["src/**/*.test.ts"],
  },
});
