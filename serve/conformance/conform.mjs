// Conformance of `pistil serve` with the official OpenAI JavaScript SDK.
//
// Usage: PISTIL_URL=http://127.0.0.1:PORT/v1 PISTIL_MODEL=name PISTIL_KEY=key node conform.mjs
//
// Every check asserts; the script prints one line per check, then "N passed, N failed",
// and exits 1 if anything failed. The model is a tiny random one, so checks compare the
// server against itself (stream vs non-stream, with vs without a stop string) instead of
// expecting particular text.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.PISTIL_URL;
const model = process.env.PISTIL_MODEL;
const apiKey = process.env.PISTIL_KEY;
if (!baseURL || !model || !apiKey) {
  console.error("set PISTIL_URL, PISTIL_MODEL and PISTIL_KEY");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Say hello in three words." },
];
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err && err.stack ? err.stack : err}`);
  }
}

// Reads a whole chat stream and checks the framing invariants every stream must keep.
async function readChatStream(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 2, "at least a role chunk and a finish chunk");
  const first = chunks[0];
  assert.equal(first.object, "chat.completion.chunk");
  assert.match(first.id, /^chatcmpl-/);
  assert.equal(first.choices[0].delta.role, "assistant", "the first delta carries the role");
  let content = "";
  let reasoning = "";
  let finishes = 0;
  let finish = null;
  let usage = null;
  const calls = [];
  for (const [i, c] of chunks.entries()) {
    assert.equal(c.id, first.id, "same id on every chunk");
    assert.equal(c.created, first.created, "same created on every chunk");
    if (i > 0 && c.choices.length > 0) assert.equal(c.choices[0].delta.role, undefined, "role only on the first chunk");
    if (c.usage) usage = c.usage;
    if (c.choices.length === 0) continue;
    const ch = c.choices[0];
    if (ch.finish_reason) {
      finishes++;
      finish = ch.finish_reason;
      assert.deepEqual(ch.delta, {}, "the finish chunk's delta is empty");
    }
    if (typeof ch.delta.content === "string") content += ch.delta.content;
    if (typeof ch.delta.reasoning_content === "string") reasoning += ch.delta.reasoning_content;
    for (const tc of ch.delta.tool_calls ?? []) {
      assert.equal(typeof tc.index, "number", "every tool call delta has an index");
      calls[tc.index] ??= { id: "", name: "", arguments: "" };
      if (tc.id) calls[tc.index].id += tc.id;
      if (tc.function?.name) calls[tc.index].name += tc.function.name;
      calls[tc.index].arguments += tc.function?.arguments ?? "";
    }
  }
  assert.equal(finishes, 1, "exactly one chunk has a finish_reason");
  return { content, reasoning, finish, usage, calls, chunks };
}

let reference; // the greedy non-streamed answer, thinking off

await check("models list and retrieve", async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.ok(ids.includes(model), `served model ${model} in ${ids}`);
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
  assert.equal(one.object, "model");
});

await check("non-streaming chat completion", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, ...noThinking });
  assert.equal(r.object, "chat.completion");
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  const ch = r.choices[0];
  assert.equal(ch.message.role, "assistant");
  assert.ok(["stop", "length"].includes(ch.finish_reason), ch.finish_reason);
  assert.equal(typeof ch.message.content, "string");
  assert.ok(!ch.message.content.includes("<think>") && !ch.message.content.includes("</think>"));
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  if (ch.finish_reason === "length") assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, "number");
  reference = r;
});

await check("streaming chat completion with usage equals non-streaming", async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true }, ...noThinking,
  });
  const s = await readChatStream(stream);
  const last = s.chunks[s.chunks.length - 1];
  assert.deepEqual(last.choices, [], "the usage chunk has no choices");
  assert.ok(last.usage, "the last chunk carries usage");
  for (const c of s.chunks.slice(0, -1)) assert.equal(c.usage, null, "usage is null before the last chunk");
  assert.equal(s.content, reference.choices[0].message.content, "stream content == non-stream content");
  assert.equal(s.finish, reference.choices[0].finish_reason);
  assert.equal(s.usage.completion_tokens, reference.usage.completion_tokens);
  assert.equal(s.usage.total_tokens, s.usage.prompt_tokens + s.usage.completion_tokens);
});

await check("streaming without include_usage sends no usage chunk", async () => {
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, stream: true, ...noThinking });
  const s = await readChatStream(stream);
  for (const c of s.chunks) {
    assert.ok(c.choices.length === 1, "no empty-choices chunk");
    assert.equal(c.usage, undefined, "no usage key");
  }
});

await check("thinking goes to reasoning_content (and reasoning), never content", async () => {
  // The server runs with --thinking off: reasoning_effort turns it on for this request.
  const think = { reasoning_effort: "high" };
  const r = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, ...think });
  const m = r.choices[0].message;
  assert.ok(!(m.content ?? "").includes("<think>") && !(m.content ?? "").includes("</think>"));
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens > 0, "reasoning_effort turned thinking on");
  assert.equal(m.reasoning, m.reasoning_content, "reasoning repeats reasoning_content");
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, stream: true, ...think });
  const s = await readChatStream(stream);
  assert.equal(s.reasoning, m.reasoning_content ?? "", "streamed reasoning == non-streamed reasoning");
  assert.equal(s.content, m.content ?? "", "streamed content == non-streamed content");
});

await check("the server's thinking default (--thinking off) applies to a request that says nothing", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0 });
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
  assert.equal(r.choices[0].message.reasoning_content, undefined);
});

await check("models carry the context length", async () => {
  const one = await client.models.retrieve(model);
  assert.equal(one.context_length, 8192, "the --ctx the server runs with");
  assert.equal(one.max_model_len, 8192);
  assert.ok(one.meta.n_ctx_train >= one.context_length);
});

await check("stop string cuts the output, streamed and not", async () => {
  const text = reference.choices[0].message.content;
  // A stop string of two characters (code points, so no surrogate half) from the middle of
  // the greedy answer, at its first occurrence.
  const chars = Array.from(text);
  let stop = null;
  for (let i = Math.floor(chars.length / 2); i > 0 && !stop; i--) {
    const cand = chars.slice(i, i + 2).join("");
    const at = chars.slice(0, i).join("").length;
    if (chars.length >= i + 2 && text.indexOf(cand) === at && cand.trim().length > 0 && !cand.includes("\uFFFD")) stop = cand;
  }
  if (!stop) throw new Error(`reference answer too short to choose a stop string: ${JSON.stringify(text)}`);
  const want = text.slice(0, text.indexOf(stop));
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stop: [stop], ...noThinking });
  assert.equal(r.choices[0].message.content, want);
  assert.equal(r.choices[0].finish_reason, "stop");
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stop, stream: true, ...noThinking });
  const s = await readChatStream(stream);
  assert.equal(s.content, want, "streamed text stops before the stop string");
  assert.equal(s.finish, "stop");
});

await check("text completions, streamed and not, with stop", async () => {
  const prompt = "Once upon a time";
  const r = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "text_completion");
  const text = r.choices[0].text;
  const stream = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, stream: true });
  let streamed = "";
  let finish = null;
  for await (const c of stream) {
    assert.equal(c.object, "text_completion");
    streamed += c.choices[0]?.text ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(streamed, text);
  assert.equal(finish, r.choices[0].finish_reason);
  const chars = Array.from(text);
  if (chars.length >= 4 && !text.includes("\uFFFD")) {
    const stop = chars.slice(2, 4).join("");
    const cut = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, stop });
    assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(cut.choices[0].finish_reason, "stop");
  }
});

await check("tool definitions and a tool-call round trip are accepted", async () => {
  const tools = [{
    type: "function",
    function: { name: "get_weather", description: "Weather for a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
  }];
  const history = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny" },
  ];
  const r = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 6, temperature: 0 });
  const ch = r.choices[0];
  assert.ok(["stop", "length", "tool_calls"].includes(ch.finish_reason));
  for (const tc of ch.message.tool_calls ?? []) {
    assert.match(tc.id, /^call_/);
    JSON.parse(tc.function.arguments);
  }
  const stream = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 6, temperature: 0, stream: true });
  const s = await readChatStream(stream);
  assert.equal(s.content, ch.message.content ?? "");
  assert.equal(s.calls.length, (ch.message.tool_calls ?? []).length);
  await assert.rejects(
    client.chat.completions.create({ model, messages: history, tools, tool_choice: { type: "function", function: { name: "nope" } }, max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice.function.name",
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: "tool", content: "x" }], max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "messages[0].tool_call_id",
  );
});

await check("errors are OpenAI errors with the right classes", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages, max_tokens: 4 }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages, max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "max_tokens",
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages, temperature: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
  );
  const long = "word ".repeat(20000);
  for (const stream of [false, true]) {
    await assert.rejects(
      client.chat.completions.create({ model, messages: [{ role: "user", content: long }], max_tokens: 4, stream }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded" && /maximum context length/.test(e.message),
    );
  }
  const wrongKey = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

await check("the second turn of a conversation reports cached tokens", async () => {
  const turn1 = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0 });
  const m = turn1.choices[0].message;
  const history = [...messages, { role: "assistant", content: m.content ?? "", reasoning_content: m.reasoning_content },
    { role: "user", content: "And in French?" }];
  const turn2 = await client.chat.completions.create({ model, messages: history, max_tokens: 4, temperature: 0 });
  const cached = turn2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached < turn2.usage.prompt_tokens, `cached ${cached} of ${turn2.usage.prompt_tokens}`);
  assert.ok(cached >= turn1.usage.prompt_tokens - 8, `turn 2 reuses about all of turn 1's prompt (${cached} vs ${turn1.usage.prompt_tokens})`);
});

await check("an aborted stream leaves the server healthy", async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages, max_tokens: 64, temperature: 0, stream: true, ...noThinking },
    { signal: controller.signal },
  );
  let n = 0;
  try {
    for await (const _ of stream) {
      if (++n === 2) controller.abort();
    }
  } catch (e) {
    // The SDK either ends the iteration or throws an abort error; both are fine.
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", `unexpected ${e}`);
  }
  assert.ok(n >= 2, "the stream delivered chunks before the abort");
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, ...noThinking });
  assert.equal(r.choices[0].message.content, reference.choices[0].message.content);
});

// --- structured output, forced tool calls, logprobs (issue 13). The model is random, so
// its unconstrained output is noise: these checks hold only because the server constrains.

const personSchema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    email: { type: "string", format: "email" },
    tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
    pet: { anyOf: [{ type: "null" }, { type: "object", properties: { kind: { const: "cat" } }, required: ["kind"], additionalProperties: false }] },
  },
  required: ["name", "age", "email"],
  additionalProperties: false,
};

// checkPerson validates against personSchema by hand (the SDK has no validator).
function checkPerson(text) {
  const v = JSON.parse(text);
  assert.equal(typeof v, "object");
  for (const k of Object.keys(v)) assert.ok(k in personSchema.properties, `unexpected key ${k}`);
  assert.equal(typeof v.name, "string");
  const n = Array.from(v.name).length;
  assert.ok(n >= 1 && n <= 12, `name length ${n}`);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, `age ${v.age}`);
  assert.match(v.email, /^[^@\s]+@[^@\s]+\.[^@\s]+$/);
  if ("tags" in v) {
    assert.ok(Array.isArray(v.tags) && v.tags.length <= 3);
    for (const t of v.tags) assert.ok(["a", "b", "c"].includes(t));
  }
  if ("pet" in v && v.pet !== null) assert.deepEqual(v.pet, { kind: "cat" });
  return v;
}

await check("response_format json_schema: the answer validates, streamed and not, thinking on and off", async () => {
  const response_format = { type: "json_schema", json_schema: { name: "person", strict: true, schema: personSchema } };
  for (const thinking of [false, true]) {
    const extra = { chat_template_kwargs: { enable_thinking: thinking } };
    for (const seed of [1, 2]) {
      const r = await client.chat.completions.create({ model, messages, max_tokens: 160, temperature: 1, seed, response_format, ...extra });
      assert.equal(r.choices[0].finish_reason, "stop");
      checkPerson(r.choices[0].message.content);
      const stream = await client.chat.completions.create({ model, messages, max_tokens: 160, temperature: 1, seed, response_format, stream: true, ...extra });
      const s = await readChatStream(stream);
      assert.equal(s.content, r.choices[0].message.content, "same seed: streamed == non-streamed");
      assert.equal(s.finish, "stop");
    }
  }
});

await check("response_format json_object gives a JSON object", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 96, temperature: 1, seed: 3, response_format: { type: "json_object" }, ...noThinking });
  const v = JSON.parse(r.choices[0].message.content);
  assert.ok(v !== null && typeof v === "object" && !Array.isArray(v));
});

await check("a schema keyword the engine cannot honour is a 400 naming it", async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages, max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "string", pattern: "^a+$" } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format.json_schema.schema" && /pattern/.test(e.message),
  );
});

const forcedTools = [
  { type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: {
    type: "object", properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city"] } } },
  { type: "function", function: { name: "get_time", description: "Time in a zone", parameters: {
    type: "object", properties: { zone: { enum: ["UTC", "CET", "PST"] } }, required: ["zone"], additionalProperties: false } } },
];

function checkCall(call) {
  const args = JSON.parse(call.arguments);
  if (call.name === "get_weather") {
    assert.equal(typeof args.city, "string");
    assert.ok(Array.from(args.city).length <= 20);
    if ("days" in args) assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7);
  } else {
    assert.equal(call.name, "get_time");
    assert.deepEqual(Object.keys(args), ["zone"]);
    assert.ok(["UTC", "CET", "PST"].includes(args.zone));
  }
}

await check("tool_choice required and named: always a valid call, streamed and not", async () => {
  const ask = [{ role: "user", content: "What now?" }];
  for (const [tool_choice, parallel_tool_calls] of [["required", false], ["required", true], [{ type: "function", function: { name: "get_time" } }, false]]) {
    for (const thinking of [false, true]) {
      const body = { model, messages: ask, tools: forcedTools, tool_choice, parallel_tool_calls, max_tokens: 160, temperature: 1, seed: 5,
        chat_template_kwargs: { enable_thinking: thinking } };
      const r = await client.chat.completions.create(body);
      const ch = r.choices[0];
      assert.equal(ch.finish_reason, "tool_calls");
      assert.ok(ch.message.tool_calls.length >= 1);
      if (!parallel_tool_calls) assert.equal(ch.message.tool_calls.length, 1);
      for (const tc of ch.message.tool_calls) {
        assert.match(tc.id, /^call_/);
        if (typeof tool_choice === "object") assert.equal(tc.function.name, "get_time");
        checkCall(tc.function);
      }
      const s = await readChatStream(await client.chat.completions.create({ ...body, stream: true }));
      assert.equal(s.finish, "tool_calls");
      assert.deepEqual(s.calls.map((c) => [c.name, c.arguments]), ch.message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
    }
  }
});

await check("logprobs and top_logprobs in chat, streamed and not", async () => {
  const body = { model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3, ...noThinking };
  const r = await client.chat.completions.create(body);
  const content = r.choices[0].logprobs.content;
  const ends = r.choices[0].finish_reason === "stop" ? 1 : 0; // the end-of-turn token has no entry
  assert.equal(content.length, r.usage.completion_tokens - ends);
  assert.equal(Buffer.from(content.flatMap((e) => e.bytes)).toString("utf8"), r.choices[0].message.content, "the tokens' bytes are the content");
  for (const e of content) {
    assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob));
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 3);
    // greedy: the chosen token is the most likely one, first in top_logprobs
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob);
  }
  const s = await readChatStream(await client.chat.completions.create({ ...body, stream: true }));
  const streamed = s.chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []);
  assert.deepEqual(streamed, content, "streamed logprobs == non-streamed");
});

await check("logprobs in text completions, streamed and not", async () => {
  const body = { model, prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 2 };
  const r = await client.completions.create(body);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, lp.top_logprobs.length);
  if (!r.choices[0].text.includes("\uFFFD")) assert.equal(lp.tokens.join(""), r.choices[0].text);
  for (const [i, t] of lp.tokens.entries()) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Math.max(...Object.values(lp.top_logprobs[i])), lp.token_logprobs[i], `greedy token ${JSON.stringify(t)} is the most likely`);
  }
  let tokens = [];
  let logprobs = [];
  for await (const c of await client.completions.create({ ...body, stream: true })) {
    const l = c.choices[0]?.logprobs;
    if (l) { tokens.push(...l.tokens); logprobs.push(...l.token_logprobs); }
  }
  assert.deepEqual(tokens, lp.tokens);
  assert.deepEqual(logprobs, lp.token_logprobs);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
