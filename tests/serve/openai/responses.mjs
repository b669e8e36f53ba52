// OpenAI's Responses API of `recur serve` (/v1/responses) through its real clients: the
// official `openai` npm package and the Vercel AI SDK (`ai`, `@ai-sdk/openai`, whose default
// model path calls /v1/responses).
//   node tests/serve/openai/responses.mjs BASE_URL API_KEY
// The shipped model is tiny and random-ish: the checks are of structure and consistency.
// Every greedy answer is compared with /v1/chat/completions' answer to the same messages, an
// independent check of the translation (the chat endpoint renders them its own way).
import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, Output, tool } from "ai";
import { z } from "zod";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}
const J = JSON.stringify;

// the chat endpoint's greedy answer to messages, and its usage
async function chat(messages, max) {
  const c = await client.chat.completions.create({ model: "recur", messages, max_completion_tokens: max, temperature: 0 });
  return c;
}

// ---- whole -------------------------------------------------------------------------------
const question = "Tell me a fortune.";
const r = await client.responses.create({ model: "recur", input: question, max_output_tokens: 24, temperature: 0 });
check("object and ids", r.object === "response" && /^resp_/.test(r.id) && /^msg_/.test(r.output[0].id), J(r).slice(0, 300));
check("one assistant message of one output_text part", r.output.length === 1 && r.output[0].type === "message" &&
      r.output[0].role === "assistant" && r.output[0].content.length === 1 && r.output[0].content[0].type === "output_text" &&
      Array.isArray(r.output[0].content[0].annotations), J(r.output));
check("output_text (the SDK's) is the part's text", r.output_text === r.output[0].content[0].text);
check("status matches the usage", (r.status === "incomplete") === (r.usage.output_tokens === 24) &&
      (r.status !== "incomplete" || r.incomplete_details.reason === "max_output_tokens"), J([r.status, r.usage]));
check("usage adds up", r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens &&
      r.usage.output_tokens_details.reasoning_tokens === 0 && r.usage.input_tokens_details.cached_tokens <= r.usage.input_tokens, J(r.usage));
check("settings echoed", r.max_output_tokens === 24 && r.temperature === 0 && r.store === true && r.text.format.type === "text" &&
      Array.isArray(r.tools) && r.tools.length === 0, J(r).slice(0, 400));
const c = await chat([{ role: "user", content: question }], 24);
check("greedy text equals chat's", r.output_text === c.choices[0].message.content, J([r.output_text, c.choices[0].message.content]));
check("input tokens equal chat's prompt tokens", r.usage.input_tokens === c.usage.prompt_tokens &&
      r.usage.output_tokens === c.usage.completion_tokens, J([r.usage, c.usage]));

// ---- instructions and a list of items ----------------------------------------------------
const items = [{ role: "user", content: [{ type: "input_text", text: "Hello." }] },
               { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hi there." }] },
               { role: "developer", content: "Be brief." }, { role: "user", content: question }];
const ri = await client.responses.create({ model: "recur", instructions: "You tell fortunes.", input: items, max_output_tokens: 16, temperature: 0 });
const ci = await chat([{ role: "system", content: "You tell fortunes." }, { role: "user", content: "Hello." },
                       { role: "assistant", content: "Hi there." }, { role: "system", content: "Be brief." },
                       { role: "user", content: question }], 16);
check("instructions + items equal chat's system + messages", ri.output_text === ci.choices[0].message.content &&
      ri.usage.input_tokens === ci.usage.prompt_tokens && ri.instructions === "You tell fortunes.", J([ri.output_text, ci.choices[0].message.content]));

// ---- input_tokens ------------------------------------------------------------------------
if (client.responses.inputTokens?.count) {
  const n = await client.responses.inputTokens.count({ model: "recur", instructions: "You tell fortunes.", input: items });
  check("inputTokens.count equals usage.input_tokens", n.object === "response.input_tokens" && n.input_tokens === ri.usage.input_tokens, J(n));
} else {
  check("the openai package has responses.inputTokens.count", false);
}

// ---- streamed ----------------------------------------------------------------------------
const stream = await client.responses.create({ model: "recur", input: question, max_output_tokens: 24, temperature: 0, stream: true });
const events = [];
for await (const ev of stream) events.push(ev);
const types = events.map((e) => e.type);
const deltas = events.filter((e) => e.type === "response.output_text.delta");
const head = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
const tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"];
check("event order", J(types.slice(0, 4)) === J(head) && deltas.length > 0 &&
      types.slice(4, 4 + deltas.length).every((t) => t === "response.output_text.delta") &&
      J(types.slice(4 + deltas.length, -1)) === J(tail) &&
      ["response.completed", "response.incomplete"].includes(types.at(-1)), J(types));
check("sequence numbers count up from 0", events.every((e, i) => e.sequence_number === i));
const last = events.at(-1).response;
const streamedText = deltas.map((d) => d.delta).join("");
check("deltas concatenate to the final text", streamedText === last.output[0].content[0].text &&
      streamedText === events.find((e) => e.type === "response.output_text.done").text, J([streamedText, last.output]));
check("streamed greedy text equals the whole answer's", streamedText === r.output_text, J([streamedText, r.output_text]));
check("the final event's response has usage", last.usage.output_tokens === r.usage.output_tokens && last.id === events[0].response.id);

// ---- previous_response_id over 3 turns ---------------------------------------------------
const turns = ["Tell me a fortune.", "Another one, please.", "And a last one."];
let prev = null, conversation = [], prevTotal = 0;
for (const [k, text] of turns.entries()) {
  const t = await client.responses.create({ model: "recur", input: text, max_output_tokens: 12, temperature: 0,
                                            ...(prev ? { previous_response_id: prev.id } : {}) });
  conversation.push({ role: "user", content: text });
  const ck = await chat(conversation, 12);
  check(`turn ${k + 1}: equals chat over the whole conversation`, t.output_text === ck.choices[0].message.content &&
        t.usage.input_tokens === ck.usage.prompt_tokens, J([t.output_text, ck.choices[0].message.content, t.usage.input_tokens, ck.usage.prompt_tokens]));
  conversation.push({ role: "assistant", content: t.output_text });
  if (prev) // the previous prompt and answer come from the prefix cache (its last token is not decoded)
    check(`turn ${k + 1}: cached tokens cover the previous turn`, t.usage.input_tokens_details.cached_tokens >= prevTotal - 1 &&
          t.previous_response_id === prev.id, J([t.usage, prevTotal]));
  prevTotal = t.usage.input_tokens + t.usage.output_tokens;
  prev = t;
}
const got = await client.responses.retrieve(prev.id);
check("retrieve gives the stored response", got.id === prev.id && got.output[0].content[0].text === prev.output_text);
try {
  await client.responses.create({ model: "recur", input: "x", previous_response_id: "resp_nonexistent" });
  check("an unknown previous_response_id is refused", false);
} catch (e) {
  check("an unknown previous_response_id: BadRequestError naming it", e instanceof OpenAI.BadRequestError && /resp_nonexistent/.test(e.message), String(e));
}

// ---- structured output -------------------------------------------------------------------
const Thing = z.object({ count: z.number().int(), id: z.uuid(), name: z.string().max(12) });
const parsed = await client.responses.parse({ model: "recur", input: "Describe a thing as JSON.", max_output_tokens: 200, temperature: 0,
                                              text: { format: zodTextFormat(Thing, "thing") } });
check("zodTextFormat: the output parses and follows the schema", parsed.status === "completed" && parsed.output_parsed !== null &&
      Thing.safeParse(parsed.output_parsed).success, J([parsed.status, parsed.output_text]));
// records and tuples: the openai helper refuses them in strict mode, so the schema is zod's own
// (the tuple first: greedy, the tiny model closes this record, and the object, within the length)
const Bag = z.object({ pair: z.tuple([z.string().max(6), z.number().int()]), tags: z.record(z.string().max(4), z.number().int()) });
const schema = z.toJSONSchema(Bag);
const bag = await client.responses.create({ model: "recur", input: "A bag as JSON.", max_output_tokens: 300, temperature: 0,
                                            text: { format: { type: "json_schema", name: "bag", schema, strict: false } } });
let bagValue = null;
try { bagValue = JSON.parse(bag.output_text); } catch { /* checked below */ }
check("a record and a tuple: the output follows the schema", bag.status === "completed" && bagValue !== null &&
      Bag.safeParse(bagValue).success, J([bag.status, bag.output_text]));

// ---- tools: a named function forced, its function_call item, the result's turn ------------
const fn = { name: "get_time", description: "The time in a zone.",
             parameters: { type: "object", properties: { tz: { type: "string", enum: ["UTC", "CET"] } }, required: ["tz"], additionalProperties: false } };
const ask = "What time is it in Paris?";
const tr = await client.responses.create({ model: "recur", input: ask, tools: [{ type: "function", ...fn, strict: true }],
                                          tool_choice: { type: "function", name: "get_time" }, parallel_tool_calls: false,
                                          max_output_tokens: 120, temperature: 0 });
const call = tr.output[0];
let callArgs = null;
try { callArgs = JSON.parse(call.arguments); } catch { /* checked below */ }
check("tools: one function_call item", tr.output.length === 1 && call.type === "function_call" && /^fc_/.test(call.id) &&
      /^call_/.test(call.call_id) && call.name === "get_time" && call.status === "completed" && tr.output_text === "", J(tr.output));
check("tools: the arguments follow the schema", callArgs !== null && ["UTC", "CET"].includes(callArgs.tz) &&
      Object.keys(callArgs).length === 1, call.arguments);
const tcc = await client.chat.completions.create({ model: "recur", messages: [{ role: "user", content: ask }],
                                                   tools: [{ type: "function", function: fn }], parallel_tool_calls: false,
                                                   tool_choice: { type: "function", function: { name: "get_time" } },
                                                   max_completion_tokens: 120, temperature: 0 });
check("tools: the call equals chat's", tcc.choices[0].message.tool_calls?.[0]?.function.arguments === call.arguments,
      J([tcc.choices[0].message, call]));
const tr2 = await client.responses.create({ model: "recur", previous_response_id: tr.id, max_output_tokens: 12, temperature: 0,
                                           input: [{ type: "function_call_output", call_id: call.call_id, output: "12:00" }],
                                           tools: [{ type: "function", ...fn, strict: true }] });
check("tools: the result's turn answers text, its start from the cache", tr2.output[0].type === "message" &&
      tr2.usage.input_tokens_details.cached_tokens > 0, J([tr2.output, tr2.usage]));

// ---- the Vercel AI SDK -------------------------------------------------------------------
const provider = createOpenAI({ baseURL, apiKey });
const g = await generateText({ model: provider("recur"), prompt: question, maxOutputTokens: 24, temperature: 0 });
check("AI SDK generateText: the greedy text", g.text === r.output_text && g.usage.outputTokens === r.usage.output_tokens, J([g.text, r.output_text]));
check("AI SDK generateText: the response id", /^resp_/.test(g.response.id ?? ""), J(g.response.id));
const st = streamText({ model: provider("recur"), prompt: question, maxOutputTokens: 24, temperature: 0 });
let streamed = "";
for await (const d of st.textStream) streamed += d;
check("AI SDK streamText: the greedy text", streamed === r.output_text && (await st.usage).outputTokens === r.usage.output_tokens, J([streamed, r.output_text]));
const Num = z.object({ n: z.number().int(), word: z.string().max(10) });
const o = await generateText({ model: provider("recur"), prompt: "A number and a word.", maxOutputTokens: 120, temperature: 0,
                               output: Output.object({ schema: Num }) });
check("AI SDK Output.object with z.number().int()", Num.safeParse(o.output).success, J(o.text));

const tg = await generateText({ model: provider("recur"), prompt: ask, maxOutputTokens: 120, temperature: 0,
                                tools: { get_time: tool({ description: fn.description, inputSchema: z.object({ tz: z.enum(["UTC", "CET"]) }) }) },
                                toolChoice: { type: "tool", toolName: "get_time" } });
check("AI SDK generateText with a tool(): the call", tg.toolCalls.length === 1 && tg.toolCalls[0].toolName === "get_time" &&
      ["UTC", "CET"].includes(tg.toolCalls[0].input.tz) && tg.finishReason === "tool-calls", J([tg.toolCalls, tg.finishReason]));

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
