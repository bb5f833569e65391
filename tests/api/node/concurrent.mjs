// Several streams at once through the official `openai` Node SDK: what each client got (text,
// usage, finish reason) and when its first and last chunks came. client.mjs checks it against
// `gemma-desk-cli serve`; the app's e2e (tests/e2e/scenario.py) runs this file on its own while
// the window writes an answer, with GD_BASE_URL, GD_API_KEY, GD_MODEL, GD_STREAMS and
// GD_MAX_TOKENS set, and reads the one JSON line it prints.
import OpenAI from "openai";

/** The prompt of stream `k`: different prompts, so that each answer is its own. */
export function prompt(k) {
  return `Tell me a story, part ${k + 1}.`;
}

/** What a chat-completions stream brought: its text, usage chunk, finish reason, how many chunks,
 * and when its first text and its end came (ms since the epoch). */
export async function collect(stream) {
  let text = "";
  let usage = null;
  let finish = null;
  let first = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) {
        first ??= Date.now();
        text += c.delta.content;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, usage, finish, chunks, first, last: Date.now() };
}

/** Runs `n` greedy streams at once; resolves when all have ended. */
export async function streams(client, model, n, maxTokens) {
  return Promise.all(
    Array.from({ length: n }, async (_, k) => {
      const stream = await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: prompt(k) }],
        max_completion_tokens: maxTokens,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      });
      return collect(stream);
    }),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const client = new OpenAI({
    baseURL: process.env.GD_BASE_URL,
    apiKey: process.env.GD_API_KEY,
    maxRetries: 0,
    timeout: 600_000,
  });
  const n = Number(process.env.GD_STREAMS ?? 4);
  const maxTokens = Number(process.env.GD_MAX_TOKENS ?? 64);
  console.log(JSON.stringify(await streams(client, process.env.GD_MODEL, n, maxTokens)));
}
