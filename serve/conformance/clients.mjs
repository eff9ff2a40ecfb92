// Conformance of `pistil serve` with the agent clients people point at it, unchanged:
// the Vercel AI SDK (chat and Responses providers), LangChain JS (ChatOpenAI, chat and
// Responses), the OpenAI Agents SDK (chat and Responses models). Codex CLI is run by
// run.sh. Versions are pinned in package.json.
//
// Usage: PISTIL_URL=http://127.0.0.1:PORT/v1 PISTIL_MODEL=name PISTIL_KEY=key node clients.mjs
// The server runs with --thinking off, so a request that says nothing does not think.
//
// The model is a tiny random one: checks compare each client's result with what the
// server answers to the same request through plain HTTP (same text, same usage), stream
// against non-stream, and usage against the server's /metrics.
//
// Tool loops. A random model does not emit a tool call by itself, so a loop's first half
// (the model calling the tool) needs the server to force one: when the server accepts
// tool_choice "required" (constrained decoding), each client runs its whole loop with the
// first step forced; when it answers 400 (not implemented), that half is reported as
// SKIP with the server's message, and the loop's second half still runs for real: the
// client sends the call and its result in its own history format, and the check is that
// the server rendered them (the prompt grows by the call and result) and answered.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { Agent, run, tool as agentTool, OpenAIResponsesModel, OpenAIChatCompletionsModel, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

const baseURL = process.env.PISTIL_URL;
const model = process.env.PISTIL_MODEL;
const apiKey = process.env.PISTIL_KEY;
if (!baseURL || !model || !apiKey) {
  console.error("set PISTIL_URL, PISTIL_MODEL and PISTIL_KEY");
  process.exit(2);
}
globalThis.AI_SDK_LOG_WARNINGS = false;
setTracingDisabled(true);

let passed = 0;
let failed = 0;
let skipped = 0;
async function check(name, fn) {
  try {
    const note = await fn();
    if (typeof note === "string" && note.startsWith("SKIP")) {
      skipped++;
      console.log(`skip ${name}: ${note.slice(5)}`);
      return;
    }
    passed++;
    console.log(`ok   ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err && err.stack ? err.stack : err}`);
  }
}

async function post(path, body) {
  const r = await fetch(`${baseURL}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });
  const data = await r.json();
  return { status: r.status, data };
}

async function metric(name) {
  const r = await fetch(`${baseURL.replace(/\/v1$/, "")}/metrics`, { headers: { authorization: `Bearer ${apiKey}` } });
  const line = (await r.text()).split("\n").find((l) => l.startsWith(name + " "));
  return Number(line.split(" ")[1]);
}

function responsesText(r) {
  return r.output.filter((i) => i.type === "message").flatMap((i) => i.content).map((c) => c.text).join("");
}

const prompt = "Say hello in three words.";
const weatherSchema = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };

// Does the server force a tool call? (Another issue adds constrained decoding.)
const probe = await post("/chat/completions", {
  model, messages: [{ role: "user", content: "weather in Paris?" }], max_tokens: 64, temperature: 0,
  tools: [{ type: "function", function: { name: "get_weather", parameters: weatherSchema } }], tool_choice: "required",
});
const forced = probe.status === 200;
const forcedSkip = forced ? null : `SKIP the server does not force tool calls yet (tool_choice "required" -> ${probe.status}: ${probe.data?.error?.message})`;
console.log(`tool_choice "required": ${forced ? "supported, tool loops run whole" : "not supported, tool loops run their history half"}`);

// ---- Vercel AI SDK (ai, @ai-sdk/openai) ----
const sdk = createOpenAI({ baseURL, apiKey });
const sdkProviders = [["Responses", () => sdk(model), "/responses"], ["chat", () => sdk.chat(model), "/chat/completions"]];

for (const [api, make, path] of sdkProviders) {
  await check(`AI SDK ${api}: generateText == the server's plain answer; streamText == generateText`, async () => {
    const g = await generateText({ model: make(), prompt, maxOutputTokens: 8, temperature: 0 });
    const direct = path === "/responses"
      ? await post(path, { model, input: [{ role: "user", content: prompt }], max_output_tokens: 8, temperature: 0 })
      : await post(path, { model, messages: [{ role: "user", content: prompt }], max_completion_tokens: 8, temperature: 0 });
    assert.equal(direct.status, 200);
    const directText = path === "/responses" ? responsesText(direct.data) : direct.data.choices[0].message.content;
    assert.equal(g.text, directText, "the client's text is the server's");
    assert.equal(g.finishReason, "length");
    assert.equal(g.usage.outputTokens, 8);
    assert.equal(g.usage.outputTokenDetails.reasoningTokens, 0, "the server's thinking default (off) applies");
    assert.ok(!g.text.includes("<tool_call>") && !g.text.includes("<think>"));
    const s = streamText({ model: make(), prompt, maxOutputTokens: 8, temperature: 0 });
    let text = "";
    for await (const part of s.fullStream) {
      if (part.type === "error") throw part.error;
      if (part.type === "text-delta") text += part.text;
    }
    assert.equal(text, g.text, "streamed text == generated text");
    assert.equal(await s.finishReason, "length");
    assert.deepEqual((await s.usage).outputTokens, 8);
  });
}

await check("AI SDK Responses: reasoning on request (forceReasoning + reasoningEffort) arrives as reasoning", async () => {
  const opts = { openai: { forceReasoning: true, reasoningEffort: "high", reasoningSummary: "auto" } };
  const g = await generateText({ model: sdk(model), prompt, maxOutputTokens: 12, providerOptions: opts });
  assert.ok(g.usage.outputTokenDetails.reasoningTokens > 0, "thinking switched on by reasoning.effort");
  assert.ok((g.reasoningText ?? "").length > 0, "reasoning text reaches the client");
  const s = streamText({ model: sdk(model), prompt, maxOutputTokens: 12, providerOptions: opts });
  let reasoning = "";
  for await (const part of s.fullStream) {
    if (part.type === "error") throw part.error;
    if (part.type === "reasoning-delta") reasoning += part.text;
  }
  // With reasoning on, the AI SDK drops temperature and seed (OpenAI's reasoning models
  // refuse them), so the two runs sample differently: compare shapes, not text.
  assert.ok(reasoning.length > 0, "reasoning deltas reach the stream");
  assert.ok((await s.usage).outputTokenDetails.reasoningTokens > 0, "streamed usage counts the thinking");
});

await check("AI SDK Responses: a second turn from the first turn's response.messages (item references)", async () => {
  // With store on (its default) the provider sends the earlier answer back as an
  // item_reference to the server's output item, not as text.
  const first = await generateText({ model: sdk(model), prompt, maxOutputTokens: 6, temperature: 0 });
  const seen = [];
  const fetchSpy = async (url, init) => { seen.push(JSON.parse(init.body)); return fetch(url, init); };
  const spied = createOpenAI({ baseURL, apiKey, fetch: fetchSpy });
  const messages = [{ role: "user", content: prompt }, ...first.response.messages, { role: "user", content: "And then?" }];
  const second = await generateText({ model: spied(model), messages, maxOutputTokens: 4, temperature: 0 });
  assert.ok(seen[0].input.some((i) => i.type === "item_reference"), "the client sent an item reference");
  assert.ok(second.usage.inputTokens > first.usage.inputTokens + 6, "the first answer is in the second prompt");
  assert.equal(second.usage.outputTokens, 4);
});

const sdkTools = (calls) => ({
  get_weather: tool({
    description: "Weather for a city", inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => { calls.push(city); return `sunny in ${city}`; },
  }),
});
for (const [api, make] of sdkProviders) {
  await check(`AI SDK ${api}: tool loop, the model's call (forced)`, async () => {
    if (!forced) return forcedSkip;
    const calls = [];
    const g = await generateText({
      // a whole forced call on the tiny model's byte-level tokenizer takes about 50 tokens
      model: make(), prompt: "Weather in Paris?", tools: sdkTools(calls), maxOutputTokens: 96, temperature: 0,
      stopWhen: stepCountIs(2), prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
    });
    assert.equal(g.steps.length, 2, "a call step, then an answer step");
    assert.equal(g.steps[0].toolCalls[0].toolName, "get_weather");
    assert.equal(calls.length, 1, "the tool ran once");
    assert.equal(g.steps[1].toolCalls.length, 0);
    // Step 2 says toolChoice "none", so the server renders no tools in it (step 1's prompt
    // had them): its prompt is measured against the same question with no tools at all.
    const plain = await generateText({ model: make(), prompt: "Weather in Paris?", maxOutputTokens: 1, temperature: 0 });
    assert.ok(g.steps[1].usage.inputTokens > plain.usage.inputTokens + 10,
      `the second step's prompt holds the call and result (${g.steps[1].usage.inputTokens} vs ${plain.usage.inputTokens} prompt tokens without them)`);
  });
  await check(`AI SDK ${api}: tool loop, the call and its result in the history`, async () => {
    const base = [{ role: "user", content: "Weather in Paris?" }];
    const history = [...base,
      { role: "assistant", content: [{ type: "tool-call", toolCallId: "call_1", toolName: "get_weather", input: { city: "Paris" } }] },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "call_1", toolName: "get_weather", output: { type: "text", value: "sunny in Paris" } }] }];
    const calls = [];
    const without = await generateText({ model: make(), messages: base, tools: sdkTools(calls), maxOutputTokens: 4, temperature: 0 });
    const g = await generateText({ model: make(), messages: history, tools: sdkTools(calls), maxOutputTokens: 4, temperature: 0, stopWhen: stepCountIs(2) });
    assert.ok(g.usage.inputTokens > without.usage.inputTokens + 10, `the call and result were rendered (${g.usage.inputTokens} vs ${without.usage.inputTokens} prompt tokens)`);
    assert.equal(g.finishReason, "length");
    assert.equal(g.usage.outputTokens, 4);
  });
}

// ---- LangChain JS (@langchain/openai) ----
for (const useResponsesApi of [false, true]) {
  const api = useResponsesApi ? "Responses" : "chat";
  const lc = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 8, useResponsesApi, maxRetries: 0 });
  const textOf = (m) => typeof m.content === "string" ? m.content : m.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  await check(`LangChain ${api}: invoke == the server's plain answer; stream == invoke`, async () => {
    const m = await lc.invoke([new HumanMessage(prompt)]);
    const direct = await post("/chat/completions", { model, messages: [{ role: "user", content: prompt }], max_tokens: 8, temperature: 0 });
    assert.equal(textOf(m), direct.data.choices[0].message.content);
    assert.equal(m.usage_metadata.output_tokens, 8);
    assert.equal(m.usage_metadata.input_tokens, direct.data.usage.prompt_tokens);
    let text = "";
    for await (const chunk of await lc.stream([new HumanMessage(prompt)])) text += textOf(chunk);
    assert.equal(text, textOf(m), "streamed == invoked");
  });
  await check(`LangChain ${api}: bindTools, the model's call (forced)`, async () => {
    if (!forced) return forcedSkip;
    // a whole forced call on the tiny model's byte-level tokenizer takes about 50 tokens
    const roomy = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 96, useResponsesApi, maxRetries: 0 });
    // LangChain 1.5.8's Responses path drops a string tool_choice ("required", "auto")
    // and keeps only object forms, so there the call is forced by naming the function.
    const choice = useResponsesApi ? "get_weather" : "required";
    const bound = roomy.bindTools([{ type: "function", function: { name: "get_weather", description: "Weather", parameters: weatherSchema } }], { tool_choice: choice });
    const m = await bound.invoke([new HumanMessage("Weather in Paris?")]);
    assert.equal(m.tool_calls.length >= 1, true);
    assert.equal(m.tool_calls[0].name, "get_weather");
    assert.equal(typeof m.tool_calls[0].args, "object");
  });
  await check(`LangChain ${api}: bindTools, the call and its result in the history`, async () => {
    const bound = lc.bindTools([{ type: "function", function: { name: "get_weather", description: "Weather", parameters: weatherSchema } }]);
    const without = await bound.invoke([new HumanMessage("Weather in Paris?")]);
    const m = await bound.invoke([new HumanMessage("Weather in Paris?"),
      new AIMessage({ content: "", tool_calls: [{ id: "call_1", name: "get_weather", args: { city: "Paris" } }] }),
      new ToolMessage({ tool_call_id: "call_1", content: "sunny in Paris" })]);
    assert.ok(m.usage_metadata.input_tokens > without.usage_metadata.input_tokens + 10, "the call and result were rendered");
    assert.ok(!textOf(m).includes("<tool_call>"), "no tool markup in content");
  });
}

// ---- OpenAI Agents SDK (@openai/agents) ----
const agentClient = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
for (const [api, makeModel] of [["Responses", () => new OpenAIResponsesModel(agentClient, model)], ["chat", () => new OpenAIChatCompletionsModel(agentClient, model)]]) {
  await check(`Agents SDK ${api}: an agent with one tool runs to a final answer, streamed and not`, async () => {
    // The Agents SDK treats a response cut by max tokens as a failure, so the agent needs
    // an answer the model ends itself: seeds are tried until one stops within the limit
    // (a random model ends a turn with probability ~1/500 per token). That answer is the
    // one the streamed run must reproduce.
    const calls = [];
    const weather = agentTool({
      name: "get_weather", description: "Weather for a city", parameters: z.object({ city: z.string() }),
      execute: async ({ city }) => { calls.push(city); return `sunny in ${city}`; },
    });
    let done = null;
    for (let seed = 1; seed <= 80 && !done; seed++) {
      const agent = new Agent({ name: "weather", instructions: "Answer briefly.", model: makeModel(), tools: [weather],
        modelSettings: { maxTokens: 48, temperature: 1, providerData: { seed } } });
      try {
        const r = await run(agent, "Hi");
        done = { agent, r, seed };
      } catch (err) {
        if (!/incomplete/.test(String(err)) && api === "Responses") throw err;
        if (api === "chat") throw err;
      }
    }
    assert.ok(done, "some seed within 80 gave an answer the model ended");
    const { agent, r } = done;
    assert.equal(typeof r.finalOutput, "string");
    assert.ok(!r.finalOutput.includes("<tool_call>"), "no tool markup in the final answer");
    const last = r.rawResponses[r.rawResponses.length - 1];
    assert.ok(last.usage.outputTokens > 0 && last.usage.outputTokens <= 48);
    const streamed = await run(agent, "Hi", { stream: true });
    let deltas = "";
    for await (const ev of streamed) {
      if (ev.type === "raw_model_stream_event" && ev.data.type === "output_text_delta") deltas += ev.data.delta;
    }
    await streamed.completed;
    assert.equal(streamed.finalOutput, r.finalOutput, "streamed run == run (same seed)");
    assert.equal(deltas, r.finalOutput, "text deltas add up to the final output");
  });
}

for (const [api, makeModel] of [["Responses", () => new OpenAIResponsesModel(agentClient, model)], ["chat", () => new OpenAIChatCompletionsModel(agentClient, model)]]) {
  await check(`Agents SDK ${api}: the agent calls its tool (forced), then answers`, async () => {
    if (!forced) return forcedSkip;
    const calls = [];
    const weather = agentTool({
      name: "get_weather", description: "Weather for a city", parameters: z.object({ city: z.string() }),
      execute: async ({ city }) => { calls.push(city); return `sunny in ${city}`; },
    });
    // The first turn is forced to call; the SDK then resets tool_choice to auto, and the
    // answer turn must end by itself (seeds as above).
    let r = null;
    for (let seed = 1; seed <= 80 && !r; seed++) {
      calls.length = 0;
      const agent = new Agent({ name: "weather", instructions: "Answer briefly.", model: makeModel(), tools: [weather],
        modelSettings: { toolChoice: "required", maxTokens: 48, temperature: 1, providerData: { seed } } });
      try { r = await run(agent, "Weather in Paris?"); } catch (err) { if (!/incomplete|max/i.test(String(err))) throw err; }
    }
    assert.ok(r, "some seed gave an answer the model ended");
    assert.ok(calls.length >= 1, "the tool ran");
    assert.ok(r.newItems.some((i) => i.type === "tool_call_item") && r.newItems.some((i) => i.type === "tool_call_output_item"));
    assert.equal(typeof r.finalOutput, "string");
  });
}

// ---- Responses API through the official SDK: previous_response_id ----
await check("openai SDK responses: previous_response_id continues a stored conversation", async () => {
  const first = await agentClient.responses.create({ model, input: "Remember the word pistil.", max_output_tokens: 4, temperature: 0 });
  const next = await agentClient.responses.create({ model, input: "Which word?", previous_response_id: first.id, max_output_tokens: 4, temperature: 0 });
  assert.equal(next.previous_response_id, first.id);
  assert.ok(next.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens, "the earlier turn is in the prompt");
  assert.ok(next.usage.input_tokens_details.cached_tokens > 0, "and the prefix cache served it");
  await assert.rejects(agentClient.responses.create({ model, input: "x", previous_response_id: "resp_unknown" }),
    (e) => e.status === 400 && /previous_response_id/.test(e.message));
});

await check("usage agrees with /metrics", async () => {
  const before = await metric("pistil_tokens_predicted_total");
  const r = await agentClient.responses.create({ model, input: prompt, max_output_tokens: 5, temperature: 0 });
  assert.equal(r.usage.output_tokens, 5);
  assert.equal(await metric("pistil_tokens_predicted_total") - before, 5);
});

console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
