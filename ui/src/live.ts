/** One polite live region for short announcements ("Copied", "Answer complete"). */

let region: HTMLElement | null = null;

export function announce(text: string): void {
  if (!region || !region.isConnected) {
    region = document.createElement("div");
    region.setAttribute("role", "status");
    region.setAttribute("aria-live", "polite");
    region.className = "visually-hidden";
    region.dataset.testid = "announcer";
    document.body.append(region);
  }
  region.textContent = text;
}
