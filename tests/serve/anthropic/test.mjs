// The official `@anthropic-ai/sdk` npm package as a real client of `recur serve`'s /v1/messages:
//   node tests/serve/anthropic/test.mjs BASE_URL API_KEY EXPECTED_JSON_FILE
// EXPECTED_JSON_FILE (written by test_serve_messages.py from /v1/chat/completions and
// /v1/chat/completions/input_tokens of the same chats, greedy): {"text": the answer to USER
// with SYSTEM, "input_tokens": that chat's prompt tokens, "count": the tokens of USER alone}.
// Checks: messages.create whole, streamed (stream: true, and the messages.stream helper: the
// events in order, the deltas joined are the final text, finalMessage()), stop_sequences,
// max_tokens, countTokens, and the server's errors as the SDK's error classes.
import { readFileSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, apiKey, expectedFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedFile, "utf8"));
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}

const SYSTEM = "You are terse.", USER = "Tell me a fortune.";
const base = { model: "recur", max_tokens: 24, temperature: 0, system: SYSTEM,
               messages: [{ role: "user", content: USER }] };

// whole
const m = await client.messages.create(base);
check("type and role", m.type === "message" && m.role === "assistant", JSON.stringify(m));
check("id msg_", /^msg_/.test(m.id), m.id);
check("one text block", m.content.length === 1 && m.content[0].type === "text");
check("greedy text equals chat completions'", m.content[0].text === want.text,
      JSON.stringify([m.content[0].text, want.text]));
check("stop_reason", ["end_turn", "max_tokens"].includes(m.stop_reason), m.stop_reason);
check("usage: input tokens (fresh + cached) equal the chat's",
      m.usage.input_tokens + m.usage.cache_read_input_tokens === want.input_tokens,
      JSON.stringify(m.usage));
check("usage: output tokens", m.usage.output_tokens > 0 && m.usage.output_tokens <= 24);

// stream: true, raw events
const raw = await client.messages.create({ ...base, stream: true });
const names = [];
let joined = "", delta = null, startUsage = null;
for await (const ev of raw) {
  names.push(ev.type);
  if (ev.type === "message_start") startUsage = ev.message.usage;
  if (ev.type === "content_block_delta") joined += ev.delta.text;
  if (ev.type === "message_delta") delta = ev;
}
const order = names.filter((n) => n !== "content_block_delta");
check("events in order",
      JSON.stringify(order) === JSON.stringify(["message_start", "content_block_start",
                                                "content_block_stop", "message_delta",
                                                "message_stop"]), JSON.stringify(names));
check("streamed deltas: the greedy text", joined === want.text, JSON.stringify(joined));
check("message_delta: stop_reason and output tokens",
      delta && delta.delta.stop_reason === m.stop_reason &&
      delta.usage.output_tokens === m.usage.output_tokens, JSON.stringify(delta));
check("message_start's usage", startUsage &&
      startUsage.input_tokens + startUsage.cache_read_input_tokens === want.input_tokens,
      JSON.stringify(startUsage));

// the messages.stream helper
const helper = client.messages.stream(base);
let texts = "";
helper.on("text", (t) => { texts += t; });
const final = await helper.finalMessage();
check("stream helper: text events joined", texts === want.text, JSON.stringify(texts));
check("stream helper: finalMessage", final.content[0].text === want.text &&
      final.stop_reason === m.stop_reason && final.usage.output_tokens === m.usage.output_tokens,
      JSON.stringify(final));

// max_tokens
const short = await client.messages.create({ ...base, max_tokens: 2 });
check("max_tokens: stop_reason max_tokens", short.stop_reason === "max_tokens" &&
      short.usage.output_tokens === 2, JSON.stringify(short));

// stop_sequences: the first two characters of the greedy text's second word, so it is met
const words = want.text.trim().split(/\s+/);
const stopAt = words.length > 1 ? words[1].slice(0, 2) : null;
if (stopAt) {
  const s = await client.messages.create({ ...base, stop_sequences: [stopAt, "zzqx-never"] });
  check("stop_sequences: stop_reason", s.stop_reason === "stop_sequence", JSON.stringify(s));
  check("stop_sequences: the matched one", s.stop_sequence === stopAt, s.stop_sequence);
  check("stop_sequences: the text before it",
        s.content[0].text === want.text.slice(0, want.text.indexOf(stopAt)),
        JSON.stringify(s.content[0].text));
}

// countTokens
const n = await client.messages.countTokens({ model: "recur", messages: [{ role: "user", content: USER }] });
check("countTokens", n.input_tokens === want.count, JSON.stringify(n));

// tools: a named tool forced, its tool_use block, the tool_result turn; streamed the same
const tools = [{ name: "get_time", description: "The time in a zone.",
                 input_schema: { type: "object", properties: { tz: { type: "string", enum: ["UTC", "CET"] } }, required: ["tz"] } }];
const ask = { role: "user", content: "What time is it in Paris?" };
const tbody = { model: "recur", max_tokens: 120, temperature: 0, tools, messages: [ask],
                tool_choice: { type: "tool", name: "get_time", disable_parallel_tool_use: true } };
const tm = await client.messages.create(tbody);
const use = tm.content[0];
check("tools: one tool_use block, stop_reason tool_use", tm.content.length === 1 && use.type === "tool_use" &&
      /^toolu_/.test(use.id) && use.name === "get_time" && ["UTC", "CET"].includes(use.input.tz) &&
      tm.stop_reason === "tool_use", JSON.stringify(tm));
const ts = client.messages.stream(tbody);
let partial = "";
ts.on("inputJson", (d) => { partial += d; });
const tf = await ts.finalMessage();
check("tools streamed: the same call, input_json_delta joined", tf.content.length === 1 && tf.content[0].type === "tool_use" &&
      tf.content[0].name === use.name && JSON.stringify(tf.content[0].input) === JSON.stringify(use.input) &&
      JSON.stringify(JSON.parse(partial)) === JSON.stringify(use.input) && tf.stop_reason === "tool_use",
      JSON.stringify([tf, partial]));
const t2 = await client.messages.create({ model: "recur", max_tokens: 8, temperature: 0, tools, messages: [ask,
  { role: "assistant", content: tm.content },
  { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "12:00" }] }] });
check("tools: the tool_result turn answers text", t2.content[0].type === "text" && t2.stop_reason !== "tool_use" &&
      t2.usage.cache_read_input_tokens > 0, JSON.stringify(t2));

// errors
try {
  await client.messages.create({ ...base, temperature: 1.5 });
  check("temperature 1.5 is refused", false);
} catch (e) {
  check("temperature 1.5: BadRequestError", e instanceof Anthropic.BadRequestError && e.status === 400, String(e));
  check("the message names the field", /temperature/.test(e.message), e.message);
  check("Anthropic's error type", e.error && e.error.error && e.error.error.type === "invalid_request_error",
        JSON.stringify(e.error));
}
try {
  await new Anthropic({ baseURL, apiKey: "wrong", maxRetries: 0 }).messages.create(base);
  check("a wrong key is refused", false);
} catch (e) {
  check("a wrong key: AuthenticationError", e instanceof Anthropic.AuthenticationError && e.status === 401, String(e));
}

console.log(`anthropic sdk: ${passed} passed, ${failed} failed`);
process.exit(failed || passed === 0 ? 1 : 0);
