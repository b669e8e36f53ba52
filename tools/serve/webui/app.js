// recur serve's web page: a chat (POST /v1/chat/completions, streamed), a completion
// playground (POST /completion, streamed, with n_probs), sampling settings, and the model's
// numbers (GET /props). Plain JavaScript modules served by recur itself: no build step, no
// network beyond this server (see README.md). Everything the page keeps (conversations,
// settings, the API key, the theme) is in this browser's localStorage.
//
// Model output is untrusted: it reaches the page only as text nodes (markdown.js builds its
// elements from text; no string is ever parsed as HTML here).

import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);

// ---- storage ---------------------------------------------------------------------------------

const KEY = "recur.";

function load(name, fallback) {
  try {
    const v = localStorage.getItem(KEY + name);
    return v === null ? fallback : JSON.parse(v);
  } catch {
    return fallback;
  }
}

function save(name, value) {
  try {
    localStorage.setItem(KEY + name, JSON.stringify(value));
  } catch (e) {
    banner(`Could not save in the browser's storage: ${e.message}`);
  }
}

// ---- messages to the user ----------------------------------------------------------------------

function banner(text) {
  $("banner-text").textContent = text;
  $("banner").hidden = false;
}

// An error the page shows as it is (its message is for people).
class ShownError extends Error {}

// The text of a failed answer: llama-server's {"error": {"code", "message", "type"}}, or the body.
async function errorOf(resp) {
  let detail = "";
  try {
    const body = await resp.text();
    try {
      const j = JSON.parse(body);
      detail = j?.error?.message ?? body;
    } catch {
      detail = body;
    }
  } catch {
    // the body could not be read: the status says enough
  }
  const hint = resp.status === 401 ? " (set the API key in Settings)" : "";
  return new ShownError(`Server error ${resp.status}${detail ? ": " + detail : ""}${hint}`);
}

function lostError(e) {
  return new ShownError(`Connection lost: the server cannot be reached (${e.message})`);
}

// ---- talking to the server ---------------------------------------------------------------------

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = load("apiKey", "");
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function request(path, body, signal) {
  let resp;
  try {
    resp = await fetch(path, body === undefined
      ? { headers: headers(false), signal }
      : { method: "POST", headers: headers(true), body: JSON.stringify(body), signal });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw lostError(e);
  }
  if (!resp.ok) throw await errorOf(resp);
  return resp;
}

// The data of each server-sent event of a streamed answer, parsed as JSON.
async function* events(resp) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ShownError(`Connection lost while the answer was streaming (${e.message})`);
    }
    if (chunk.done) break;
    buf += dec.decode(chunk.value, { stream: true }).replace(/\r\n/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = ev.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data || data === "[DONE]") continue;
      let j;
      try {
        j = JSON.parse(data);
      } catch {
        throw new ShownError(`The server sent an event that is not JSON: ${data.slice(0, 200)}`);
      }
      if (j.error) throw new ShownError(`Server error ${j.error.code ?? ""}: ${j.error.message ?? "unknown"}`);
      yield j;
    }
  }
}

// ---- settings ----------------------------------------------------------------------------------

// Every sampling field the server takes. only: the one endpoint the page sends it to, and why
// (/completion calls the length n_predict).
const FIELDS = [
  { key: "temperature", label: "Temperature", kind: "number", step: "0.05", hint: "0: always the most likely token" },
  { key: "top_k", label: "Top-k", kind: "int", hint: "keep the k most likely tokens; 0: all" },
  { key: "top_p", label: "Top-p", kind: "number", step: "0.01", hint: "keep the most likely tokens up to this mass (0..1)" },
  { key: "min_p", label: "Min-p", kind: "number", step: "0.01", hint: "drop tokens below this share of the best one (0..1)" },
  { key: "repeat_penalty", label: "Repeat penalty", kind: "number", step: "0.05", hint: "1: off" },
  { key: "repeat_last_n", label: "Repeat last n", kind: "int", hint: "tokens the penalties look back; -1: all" },
  { key: "presence_penalty", label: "Presence penalty", kind: "number", step: "0.1", hint: "0: off" },
  { key: "frequency_penalty", label: "Frequency penalty", kind: "number", step: "0.1", hint: "0: off" },
  { key: "seed", label: "Seed", kind: "int", hint: "-1 or empty: a new one each time" },
  { key: "max_tokens", label: "Max tokens (max_tokens / n_predict)", kind: "int", hint: "the most tokens an answer gets" },
  { key: "ignore_eos", label: "Ignore end of text (ignore_eos)", kind: "bool", only: "completion",
    why: "a chat answer would not end with its turn" },
  { key: "stop", label: "Stop strings (one a line, at most 4)", kind: "lines" },
  { key: "grammar", label: "Grammar (GBNF, rule root)", kind: "text", placeholder: 'root ::= "yes" | "no"' },
  { key: "json_schema", label: "JSON schema", kind: "json", placeholder: '{"type": "object", "properties": {"name": {"type": "string"}}}' },
];

function fieldId(f) {
  return `set-${f.key.replace(/_/g, "-")}`;
}

function buildSettings() {
  const box = $("settings-fields");
  box.replaceChildren();
  const saved = load("settings", {});
  for (const f of FIELDS) {
    const row = document.createElement("div");
    row.className = `field field-${f.kind}`;
    const label = document.createElement("label");
    label.htmlFor = fieldId(f);
    label.textContent = f.label;
    let input;
    if (f.kind === "text" || f.kind === "json" || f.kind === "lines") {
      input = document.createElement("textarea");
      input.rows = f.kind === "lines" ? 2 : 3;
      input.spellcheck = false;
    } else {
      input = document.createElement("input");
      input.type = f.kind === "bool" ? "checkbox" : "number";
      if (f.kind === "int") input.step = "1";
      if (f.step) input.step = f.step;
    }
    input.id = fieldId(f);
    input.name = f.key;
    if (f.kind === "bool") input.checked = saved[f.key] === true;
    else input.value = saved[f.key] ?? "";
    const note = document.createElement("small");
    note.textContent = [f.hint, f.only ? `Playground only: ${f.why}` : ""].filter(Boolean).join(". ");
    if (f.kind === "bool") row.append(input, label);
    else row.append(label, input);
    if (note.textContent) row.append(note);
    box.append(row);
  }
}

// The server's defaults as placeholders, once /props has them. /props gives /completion's (the
// chat endpoint has OpenAI's: temperature 1, no top-k, top-p or min-p); the seed's is "a new
// one each time", which its hint says.
function showDefaults(defaults) {
  for (const f of FIELDS) {
    if (f.kind === "bool") continue;
    const def = f.key === "seed" ? undefined : defaults?.[f.key];
    $(fieldId(f)).placeholder = f.placeholder ?? (typeof def === "number"
      ? `server default (/completion: ${Number(def.toFixed(4))})` : "server default");
  }
}

function readSettings() {
  const out = {};
  for (const f of FIELDS) {
    const input = $(fieldId(f));
    if (f.kind === "bool") {
      if (input.checked) out[f.key] = true;
    } else if (input.value.trim() !== "") {
      out[f.key] = f.kind === "text" || f.kind === "json" || f.kind === "lines" ? input.value : input.value.trim();
    }
  }
  return out;
}

// The request fields for endpoint ("chat" or "completion") from the saved settings; throws a
// ShownError for a value that is not even a number or JSON (the server judges the rest).
function samplingFor(endpoint) {
  const s = load("settings", {});
  const body = {};
  for (const f of FIELDS) {
    const v = s[f.key];
    if (v === undefined || (f.only && f.only !== endpoint)) continue;
    const name = f.key === "max_tokens" && endpoint === "completion" ? "n_predict" : f.key;
    if (f.kind === "number" || f.kind === "int") {
      const n = Number(v);
      if (!Number.isFinite(n)) throw new ShownError(`Settings: ${f.label} is not a number: ${v}`);
      body[name] = n;
    } else if (f.kind === "bool") {
      body[name] = true;
    } else if (f.kind === "lines") {
      const lines = v.split("\n").filter((l) => l !== "");
      if (lines.length) body[name] = lines;
    } else if (f.kind === "json") {
      try {
        body[name] = JSON.parse(v);
      } catch (e) {
        throw new ShownError(`Settings: the JSON schema is not JSON (${e.message})`);
      }
    } else {
      body[name] = v;
    }
  }
  return body;
}

function initSettings() {
  buildSettings();
  showDefaults(null);
  const form = $("settings-form");
  form.addEventListener("input", (e) => {
    if (e.target.id === "set-api-key") {
      save("apiKey", e.target.value);
      return;
    }
    save("settings", readSettings());
  });
  form.addEventListener("submit", (e) => e.preventDefault());
  $("set-api-key").value = load("apiKey", "");
  $("set-api-key").addEventListener("change", () => loadProps());
  $("settings-reset").addEventListener("click", () => {
    save("settings", {});
    buildSettings();
    showDefaults(state.defaults);
  });
}

// ---- the model's numbers -----------------------------------------------------------------------

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

function count(n) {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}K` : String(n);
}

async function loadProps() {
  const info = $("model-info");
  try {
    const p = await (await request("/props")).json();
    const r = p.recur ?? {};
    const parts = [
      ["model", p.model_alias ?? p.model_path ?? "?"],
      ["architecture", r.architecture ?? "?"],
    ];
    if (r.n_params) parts.push(["parameters", count(r.n_params)]);
    if (r.model_size) parts.push(["size", bytes(r.model_size)]);
    if (r.state_bytes_per_sequence) parts.push(["state", `${bytes(r.state_bytes_per_sequence)} / sequence`]);
    if (p.total_slots) parts.push(["slots", String(p.total_slots)]);
    info.replaceChildren();
    for (const [k, v] of parts) {
      const item = document.createElement("span");
      item.className = "kv";
      item.dataset.key = k;
      const b = document.createElement("b");
      b.textContent = v;
      item.append(`${k} `, b);
      info.append(item);
    }
    info.title = `recur ${r.version ?? ""}; chat template ${p.chat_template_name ?? "?"}`;
    state.defaults = p.default_generation_settings?.params ?? null;
    showDefaults(state.defaults);
  } catch (e) {
    info.textContent = "model: unknown";
    banner(e instanceof ShownError ? e.message : `Could not read /props: ${e.message}`);
  }
}

// ---- chat --------------------------------------------------------------------------------------

const state = {
  convs: load("conversations", []),
  current: load("current", null),
  chatRun: null, // {controller, conv, msg} while an answer streams
  pgRun: null,
  defaults: null,
  lastSave: 0,
};

function newId() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

function currentConv() {
  return state.convs.find((c) => c.id === state.current) ?? null;
}

function saveConvs() {
  state.lastSave = Date.now();
  save("conversations", state.convs);
  save("current", state.current);
}

function ensureConv() {
  let c = currentConv();
  if (!c) {
    c = { id: newId(), title: "New chat", system: $("system-prompt").value, messages: [], updated: Date.now() };
    state.convs.unshift(c);
    state.current = c.id;
  }
  return c;
}

function renderSidebar() {
  const list = $("conv-list");
  list.replaceChildren();
  for (const c of state.convs) {
    const li = document.createElement("li");
    li.className = "conv";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "conv-open";
    open.textContent = c.title || "New chat";
    if (c.id === state.current) open.setAttribute("aria-current", "true");
    open.addEventListener("click", () => {
      state.current = c.id;
      saveConvs();
      renderAll();
      closeSidebar();
      $("chat-input").focus();
    });
    const del = document.createElement("button");
    del.type = "button";
    del.className = "icon conv-delete";
    del.textContent = "\u00d7";
    del.setAttribute("aria-label", `Delete the conversation "${c.title}"`);
    del.addEventListener("click", () => {
      if (state.chatRun?.conv === c) state.chatRun.controller.abort();
      state.convs = state.convs.filter((x) => x !== c);
      if (state.current === c.id) state.current = state.convs[0]?.id ?? null;
      saveConvs();
      renderAll();
    });
    li.append(open, del);
    list.append(li);
  }
}

function statsText(st) {
  const parts = [];
  if (st.tokens !== undefined) parts.push(`${st.tokens} tokens`);
  else if (st.pieces) parts.push(`about ${st.pieces} tokens`); // stopped: no usage came
  if (st.tps) parts.push(`${st.tps.toFixed(1)} tokens/s`);
  if (st.ttft !== undefined) parts.push(`first token ${Math.round(st.ttft)} ms`);
  if (st.cached !== undefined) parts.push(`${st.cached} of ${st.prompt} prompt tokens reused from the cache`);
  if (st.stopped) parts.push("stopped");
  return parts.join(" \u00b7 ");
}

function button(label, cls, onClick, aria) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = label;
  if (aria) b.setAttribute("aria-label", aria);
  b.addEventListener("click", onClick);
  return b;
}

// The element of one message; its content is re-rendered by fillMessage.
function messageEl(conv, msg, index) {
  const box = document.createElement("article");
  box.className = `msg ${msg.role}`;
  box.dataset.index = index;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = msg.role === "user" ? "You" : "Model";
  // a reasoning model's thought (the server's reasoning_content), folded away above the answer
  const thinking = document.createElement("details");
  thinking.className = "thinking";
  const summary = document.createElement("summary");
  summary.textContent = "Thinking";
  const thought = document.createElement("div");
  thought.className = "thought";
  thinking.append(summary, thought);
  const content = document.createElement("div");
  content.className = "content";
  const err = document.createElement("div");
  err.className = "error";
  err.setAttribute("role", "alert");
  const stats = document.createElement("div");
  stats.className = "stats";
  const tools = document.createElement("div");
  tools.className = "msg-tools";
  const busy = () => state.chatRun !== null;
  if (msg.role === "user") {
    tools.append(button("Edit", "small edit", () => !busy() && editMessage(conv, index, box), "Edit and resend this message"));
  } else {
    if (msg.content) tools.append(button("Copy", "small copy", (e) => copyText(msg.content, e.currentTarget), "Copy the answer"));
    if (index === conv.messages.length - 1)
      tools.append(button("Regenerate", "small regenerate", () => !busy() && regenerate(conv), "Regenerate this answer"));
  }
  box.append(who, thinking, content, err, stats, tools);
  fillMessage(box, msg);
  return box;
}

function fillMessage(box, msg) {
  const thinking = box.querySelector(".thinking");
  if (thinking) {
    thinking.hidden = !msg.reasoning;
    thinking.querySelector(".thought").textContent = msg.reasoning ?? "";
    // open while the model thinks, folded once the answer starts (once each: a reader's own
    // click is not undone at the next token)
    if (msg.pending && msg.reasoning && !msg.content && !thinking.dataset.auto) {
      thinking.open = true;
      thinking.dataset.auto = "opened";
    } else if (msg.content && thinking.dataset.auto === "opened") {
      thinking.open = false;
      thinking.dataset.auto = "folded";
    }
  }
  const content = box.querySelector(".content");
  if (msg.role === "assistant") content.replaceChildren(renderMarkdown(msg.content));
  else content.textContent = msg.content;
  const err = box.querySelector(".error");
  err.textContent = msg.error ?? "";
  err.hidden = !msg.error;
  box.querySelector(".stats").textContent = msg.stats ? statsText(msg.stats) : "";
  box.dataset.state = msg.pending ? "streaming" : msg.error ? "error" : msg.stats?.stopped ? "stopped" : "done";
  // a screen reader reads the answer once it is complete, not at every token
  box.setAttribute("aria-busy", String(Boolean(msg.pending)));
}

function renderMessages() {
  const conv = currentConv();
  const box = $("messages");
  box.replaceChildren();
  if (!conv || conv.messages.length === 0) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = "Send a message to start. Conversations are kept in this browser.";
    box.append(empty);
    return;
  }
  conv.messages.forEach((m, i) => box.append(messageEl(conv, m, i)));
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  renderSidebar();
  renderMessages();
  const conv = currentConv();
  $("system-prompt").value = conv?.system ?? load("lastSystem", "");
  const running = state.chatRun !== null;
  $("send").hidden = running;
  $("stop").hidden = !running;
}

async function copyText(text, btn) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // no clipboard permission (or not a secure context): the old way, through a selection
    const t = document.createElement("textarea");
    t.value = text;
    t.className = "offscreen";
    document.body.append(t);
    t.select();
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    t.remove();
  }
  if (btn) {
    const old = btn.textContent;
    btn.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => (btn.textContent = old), 1200);
  }
}

// Streams the next answer of conv into a new assistant message.
async function generate(conv) {
  // an answer that failed or was stopped before its first token is not part of the history
  const history = conv.messages.filter((m) => !(m.role === "assistant" && m.content === "" && !m.reasoning));
  const msg = { role: "assistant", content: "", pending: true };
  conv.messages.push(msg);
  conv.updated = Date.now();
  const controller = new AbortController();
  state.chatRun = { controller, conv, msg };
  saveConvs();
  renderAll();
  const t0 = performance.now();
  let tFirst = 0, tLast = 0, usage = null, pieces = 0;
  let frame = 0;
  const show = () => {
    frame = 0;
    if (state.current !== conv.id) return;
    const box = $("messages").querySelector(`.msg[data-index="${conv.messages.indexOf(msg)}"]`);
    if (!box) return;
    const box2 = $("messages");
    const atEnd = box2.scrollHeight - box2.scrollTop - box2.clientHeight < 80;
    fillMessage(box, msg);
    if (atEnd) box2.scrollTop = box2.scrollHeight;
  };
  try {
    const messages = [];
    if (conv.system.trim()) messages.push({ role: "system", content: conv.system });
    for (const m of history) messages.push({ role: m.role, content: m.content });
    const body = { messages, stream: true, stream_options: { include_usage: true }, ...samplingFor("chat") };
    const resp = await request("/v1/chat/completions", body, controller.signal);
    for await (const ev of events(resp)) {
      if (ev.usage) usage = ev.usage;
      const delta = ev.choices?.[0]?.delta ?? {};
      const piece = delta.content, thought = delta.reasoning_content;
      if (piece || thought) {
        if (!tFirst) tFirst = performance.now();
        tLast = performance.now();
        if (piece) msg.content += piece;
        if (thought) msg.reasoning = (msg.reasoning ?? "") + thought;
        pieces++; // recur sends a token's text a chunk (less what a stop string may hold back)
        if (!frame) frame = requestAnimationFrame(show);
        // a reload mid-answer keeps what came so far
        if (Date.now() - state.lastSave > 1000) saveConvs();
      }
    }
  } catch (e) {
    if (e.name === "AbortError") msg.stopped = true;
    else msg.error = e instanceof ShownError ? e.message : `Error: ${e.message}`;
  }
  if (frame) cancelAnimationFrame(frame);
  delete msg.pending;
  const st = {};
  if (tFirst) st.ttft = tFirst - t0;
  if (usage) {
    st.tokens = usage.completion_tokens;
    st.prompt = usage.prompt_tokens;
    st.cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    if (tLast > tFirst && usage.completion_tokens > 1) st.tps = (usage.completion_tokens - 1) / ((tLast - tFirst) / 1000);
  } else if (pieces) {
    st.pieces = pieces;
    if (tLast > tFirst && pieces > 1) st.tps = (pieces - 1) / ((tLast - tFirst) / 1000);
  }
  if (msg.stopped) {
    st.stopped = true;
    delete msg.stopped;
  }
  if (Object.keys(st).length) msg.stats = st;
  state.chatRun = null;
  conv.updated = Date.now();
  saveConvs();
  renderAll();
}

function send(text) {
  if (state.chatRun) return;
  const conv = ensureConv();
  conv.system = $("system-prompt").value;
  conv.messages.push({ role: "user", content: text });
  if (conv.title === "New chat") conv.title = text.slice(0, 60).replace(/\s+/g, " ");
  generate(conv);
}

function regenerate(conv) {
  while (conv.messages.length && conv.messages.at(-1).role === "assistant") conv.messages.pop();
  if (conv.messages.length) generate(conv);
  else renderAll();
}

function editMessage(conv, index, box) {
  const content = box.querySelector(".content");
  const area = document.createElement("textarea");
  area.className = "edit-area";
  area.value = conv.messages[index].content;
  area.rows = Math.min(10, area.value.split("\n").length + 1);
  area.setAttribute("aria-label", "Edit the message");
  const resend = () => {
    const text = area.value.trim();
    if (!text) return;
    conv.messages[index].content = text;
    conv.messages.length = index + 1; // the answers after it belong to the old text
    generate(conv);
  };
  const row = document.createElement("div");
  row.className = "row";
  row.append(button("Send", "primary small resend", resend), button("Cancel", "small", () => renderMessages()));
  area.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      resend();
    } else if (e.key === "Escape") {
      renderMessages();
    }
  });
  content.replaceChildren(area, row);
  area.focus();
}

function initChat() {
  const input = $("chat-input");
  $("chat-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text || state.chatRun) return;
    input.value = "";
    send(text);
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  // Escape: closes the sidebar (phone width), else stops the answer that streams
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    if (document.body.classList.contains("sidebar-open")) {
      closeSidebar();
      $("sidebar-toggle").focus();
    } else if (state.chatRun) {
      state.chatRun.controller.abort();
    }
  });
  $("stop").addEventListener("click", () => state.chatRun?.controller.abort());
  $("new-chat").addEventListener("click", () => {
    state.current = null;
    saveConvs();
    renderAll();
    closeSidebar();
    input.focus();
  });
  $("system-prompt").addEventListener("input", (e) => {
    save("lastSystem", e.target.value);
    const conv = currentConv();
    if (conv) {
      conv.system = e.target.value;
      saveConvs();
    }
  });
  // code blocks' copy buttons (markdown.js makes them; one listener for all)
  $("messages").addEventListener("click", (e) => {
    const b = e.target.closest(".copy-code");
    if (b) copyText(b.closest(".code-block").querySelector("pre").textContent, b);
  });
  $("sidebar-toggle").addEventListener("click", () => {
    const open = !document.body.classList.contains("sidebar-open");
    document.body.classList.toggle("sidebar-open", open);
    $("sidebar-toggle").setAttribute("aria-expanded", String(open));
    if (open) $("new-chat").focus();
  });
  // a conversation whose answer was streaming when the page went away: it ends there
  for (const c of state.convs)
    for (const m of c.messages)
      if (m.pending) {
        delete m.pending;
        m.stats = { ...(m.stats ?? {}), stopped: true };
      }
  if (!currentConv()) state.current = state.convs[0]?.id ?? null;
  renderAll();
}

function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("sidebar-toggle").setAttribute("aria-expanded", "false");
}

// ---- playground --------------------------------------------------------------------------------

function pct(logprob) {
  const p = Math.exp(logprob) * 100;
  return p >= 10 ? `${p.toFixed(1)}%` : p >= 0.1 ? `${p.toFixed(2)}%` : `${p.toExponential(1)}%`;
}

// A token's text with its whitespace made visible, for the tooltip.
function visible(t) {
  return t.replace(/ /g, "\u2423").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205";
}

function tokenSpan(text, prob) {
  const s = document.createElement("span");
  s.className = "tok";
  s.textContent = text;
  if (prob) {
    s.dataset.p = String(Math.exp(prob.logprob));
    // low probability: a stronger tint (the class picks a colour from the theme)
    const p = Math.exp(prob.logprob);
    s.classList.add(p > 0.5 ? "p-high" : p > 0.1 ? "p-mid" : "p-low");
    s.probs = prob; // read by the tooltip
  }
  return s;
}

function showTip(span) {
  const tip = $("pg-tip");
  const out = $("pg-output");
  out.querySelectorAll(".tok.selected").forEach((x) => x.classList.remove("selected"));
  if (!span?.probs) {
    tip.hidden = true;
    return;
  }
  span.classList.add("selected");
  const pr = span.probs;
  tip.replaceChildren();
  const head = document.createElement("div");
  head.className = "tip-head";
  const code = document.createElement("code");
  code.textContent = visible(pr.token);
  head.append(code, ` ${pct(pr.logprob)}`);
  tip.append(head);
  const list = document.createElement("ol");
  for (const alt of pr.top_logprobs ?? []) {
    const li = document.createElement("li");
    if (alt.id === pr.id) li.className = "chosen";
    const c = document.createElement("code");
    c.textContent = visible(alt.token);
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${Math.max(1, Math.exp(alt.logprob) * 100)}%`;
    const p = document.createElement("span");
    p.className = "p";
    p.textContent = pct(alt.logprob);
    li.append(c, p, bar);
    list.append(li);
  }
  tip.append(list);
  tip.hidden = false;
  // fixed to the viewport, under the token (above it near the bottom), inside the window
  const r = span.getBoundingClientRect();
  const w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = `${Math.max(8, Math.min(r.left, window.innerWidth - w - 8))}px`;
  tip.style.top = `${r.bottom + h + 6 < window.innerHeight ? r.bottom + 6 : Math.max(8, r.top - h - 6)}px`;
}

async function runPlayground() {
  if (state.pgRun) return;
  const out = $("pg-output"), err = $("pg-error"), stats = $("pg-stats");
  const prompt = $("pg-prompt").value;
  out.replaceChildren();
  const promptSpan = document.createElement("span");
  promptSpan.className = "pg-prompt-text";
  promptSpan.textContent = prompt;
  out.append(promptSpan);
  err.hidden = true;
  stats.textContent = "";
  $("pg-tip").hidden = true;
  const controller = new AbortController();
  state.pgRun = { controller };
  $("pg-run").hidden = true;
  $("pg-stop").hidden = false;
  out.dataset.state = "streaming";
  const t0 = performance.now();
  let tFirst = 0, final = null, n = 0;
  try {
    const nProbs = Number($("pg-nprobs").value || 0);
    save("nProbs", $("pg-nprobs").value);
    const body = { prompt, stream: true, ...samplingFor("completion") };
    if (nProbs > 0) body.n_probs = nProbs;
    const resp = await request("/completion", body, controller.signal);
    for await (const ev of events(resp)) {
      if (ev.stop) {
        final = ev;
        continue;
      }
      if (!tFirst) tFirst = performance.now();
      const probs = ev.completion_probabilities;
      if (probs?.length) {
        for (const p of probs) out.append(tokenSpan(p.token, p));
        n += probs.length;
      } else if (ev.content) {
        out.append(tokenSpan(ev.content, null));
        n += ev.tokens?.length ?? 1;
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") {
      err.textContent = e instanceof ShownError ? e.message : `Error: ${e.message}`;
      err.hidden = false;
    }
  }
  const parts = [];
  if (final?.timings) {
    const t = final.timings;
    parts.push(`${final.tokens_predicted} tokens`, `${t.predicted_per_second.toFixed(1)} tokens/s`);
    parts.push(`prompt ${t.prompt_n} tokens at ${t.prompt_per_second.toFixed(0)} tokens/s`);
    parts.push(`${t.cache_n} prompt tokens reused from the cache`);
  } else if (n) {
    parts.push(`${n} tokens`, "stopped");
  }
  if (tFirst) parts.push(`first token ${Math.round(tFirst - t0)} ms`);
  if (final?.stop_type) parts.push(`ended by: ${final.stop_type}`);
  stats.textContent = parts.join(" \u00b7 ");
  out.dataset.state = final ? "done" : "stopped";
  state.pgRun = null;
  $("pg-run").hidden = false;
  $("pg-stop").hidden = true;
}

function initPlayground() {
  const out = $("pg-output");
  $("pg-nprobs").value = load("nProbs", "5");
  const savedPrompt = load("pgPrompt", null);
  if (savedPrompt !== null) $("pg-prompt").value = savedPrompt;
  $("pg-prompt").addEventListener("input", (e) => save("pgPrompt", e.target.value));
  $("pg-run").addEventListener("click", runPlayground);
  $("pg-stop").addEventListener("click", () => state.pgRun?.controller.abort());
  $("pg-prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      runPlayground();
    }
  });
  out.addEventListener("mouseover", (e) => {
    const t = e.target.closest(".tok");
    if (t) showTip(t);
  });
  out.addEventListener("mouseleave", () => showTip(null));
  out.addEventListener("blur", () => showTip(null));
  // keyboard: the arrow keys walk the tokens that have probabilities
  out.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowRight" && e.key !== "ArrowLeft" && e.key !== "Home" && e.key !== "End") return;
    const toks = [...out.querySelectorAll(".tok")].filter((t) => t.probs);
    if (!toks.length) return;
    e.preventDefault();
    const at = toks.findIndex((t) => t.classList.contains("selected"));
    const next = e.key === "Home" ? 0 : e.key === "End" ? toks.length - 1
      : e.key === "ArrowRight" ? Math.min(toks.length - 1, at + 1) : Math.max(0, at < 0 ? toks.length - 1 : at - 1);
    toks[next].scrollIntoView({ block: "nearest" });
    showTip(toks[next]);
  });
}

// ---- tabs and theme ----------------------------------------------------------------------------

function initTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab, focus) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute("aria-controls")).hidden = !on;
    }
    save("tab", tab.id);
    if (focus) tab.focus();
  };
  for (const t of tabs) {
    t.addEventListener("click", () => select(t, false));
    t.addEventListener("keydown", (e) => {
      const i = tabs.indexOf(t);
      const to = e.key === "ArrowRight" ? tabs[(i + 1) % tabs.length] : e.key === "ArrowLeft" ? tabs[(i + tabs.length - 1) % tabs.length] : null;
      if (to) {
        e.preventDefault();
        select(to, true);
      }
    });
  }
  const saved = $(load("tab", "tab-chat"));
  if (saved && tabs.includes(saved)) select(saved, false);
}

function initTheme() {
  const media = window.matchMedia("(prefers-color-scheme: dark)");
  const names = { auto: "follows the system", light: "light", dark: "dark" };
  const apply = () => {
    const choice = load("theme", "auto");
    const dark = choice === "dark" || (choice === "auto" && media.matches);
    document.documentElement.dataset.theme = dark ? "dark" : "light";
    $("theme-toggle").setAttribute("aria-label", `Theme: ${names[choice] ?? choice} (change)`);
    $("theme-toggle").title = `Theme: ${names[choice] ?? choice}`;
  };
  media.addEventListener("change", apply);
  $("theme-toggle").addEventListener("click", () => {
    const order = ["auto", "light", "dark"];
    save("theme", order[(order.indexOf(load("theme", "auto")) + 1) % order.length]);
    apply();
  });
  apply();
}

// ---- start -------------------------------------------------------------------------------------

$("banner-close").addEventListener("click", () => ($("banner").hidden = true));
// nothing should get here; if something does, it is shown in the page too (and still logged)
window.addEventListener("unhandledrejection", (e) => banner(`Unexpected error: ${e.reason?.message ?? e.reason}`));
window.addEventListener("error", (e) => banner(`Unexpected error: ${e.message}`));
initTheme();
initTabs();
initSettings();
initChat();
initPlayground();
loadProps();
document.documentElement.dataset.ready = "true";
