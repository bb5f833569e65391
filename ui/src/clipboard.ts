import { copyText as writeClipboard } from "./api";

/** Copies text to the OS clipboard (see `api.copyText`); true on success. */
export async function copyText(text: string): Promise<boolean> {
  try {
    await writeClipboard(text);
    return true;
  } catch {
    return false;
  }
}
