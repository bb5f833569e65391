import { appStatus } from "./api";
import { el } from "./dom";
import { firstRunView } from "./views/first-run";
import { modelReadyView } from "./views/model-ready";
import { sidebarView } from "./views/sidebar";
import { startupErrorView } from "./views/startup-error";

/** Renders the window into `root`: the sidebar, and a main area chosen by the app status. */
export async function mountApp(root: HTMLElement): Promise<void> {
  const main = el("main", { class: "content", "aria-busy": "true" }, el("p", { class: "loading" }, "Loading…"));
  root.replaceChildren(sidebarView(null), main);
  try {
    const status = await appStatus();
    root.replaceChildren(sidebarView(status.version), main);
    main.replaceChildren(status.model ? modelReadyView(status.model) : firstRunView(status.modelsDir));
  } catch (error) {
    main.replaceChildren(startupErrorView(error));
  } finally {
    main.removeAttribute("aria-busy");
  }
}
