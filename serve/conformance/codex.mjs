// Codex CLI (npm @openai/codex, whose package ships the binary) against pistil serve:
// `codex exec` with a custom provider on wire_api = "responses", in a temporary HOME and
// working folder. Codex only speaks the Responses API.
//
// Usage: PISTIL_URL=... PISTIL_MODEL=... PISTIL_KEY=... node codex.mjs
//
// Codex's own system prompt and tool set are ~18K tokens, which the tiny model on two
// CPU cores prefills in minutes, so the config trims them the way a user of a small local
// model would (model_instructions_file, no environment/permission preambles, no web
// search, multi-agent or goal tools): what remains is Codex's skills preamble, four
// function tools (exec_command, write_stdin, request_user_input, view_image) and the
// prompt, about 4K tokens. Checks: exit status 0; the answer arrives as Codex's
// agent_message; the usage Codex reports equals what the server counted on /metrics.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const baseURL = process.env.PISTIL_URL;
const model = process.env.PISTIL_MODEL;
const apiKey = process.env.PISTIL_KEY;
const here = dirname(fileURLToPath(import.meta.url));
const codex = join(here, "node_modules", ".bin", "codex");

async function metric(name) {
  const r = await fetch(`${baseURL.replace(/\/v1$/, "")}/metrics`, { headers: { authorization: `Bearer ${apiKey}` } });
  const text = await r.text();
  let sum = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith(name + " ") || line.startsWith(name + "{")) sum += Number(line.split(" ").pop());
  }
  return sum;
}

const root = mkdtempSync(join(tmpdir(), "pistil-codex-"));
let failed = 0;
try {
  const home = join(root, "home");
  const work = join(root, "work");
  mkdirSync(join(home, ".codex"), { recursive: true });
  mkdirSync(work);
  writeFileSync(join(root, "instructions.md"), "You are a terse assistant.\n");
  writeFileSync(join(home, ".codex", "config.toml"), `model = "${model}"
model_provider = "pistil"
model_context_window = 8192
model_instructions_file = "${join(root, "instructions.md")}"
include_permissions_instructions = false
include_environment_context = false
include_apps_instructions = false
web_search = "disabled"

[features]
multi_agent = false
goals = false

[model_providers.pistil]
name = "pistil"
base_url = "${baseURL}"
wire_api = "responses"
env_key = "PISTIL_CODEX_KEY"
`);
  const before = {
    prompt: await metric("pistil_prompt_tokens_total"),
    generated: await metric("pistil_tokens_predicted_total"),
    responses: await metric('pistil_requests_total{endpoint="responses",status="200"}'),
  };
  const run = spawnSync(codex, ["exec", "--skip-git-repo-check", "--json", "-C", work, "Say hi."], {
    env: { PATH: process.env.PATH, HOME: home, CODEX_HOME: join(home, ".codex"), PISTIL_CODEX_KEY: apiKey },
    input: "", encoding: "utf8", timeout: 240_000,
  });
  if (run.error) throw run.error;
  const events = run.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
  const fatal = events.filter((e) => e.type === "error" || e.type === "turn.failed");
  assert.equal(run.status, 0, `codex exit status ${run.status}: ${JSON.stringify(fatal)} ${run.stderr.slice(-500)}`);
  const message = events.find((e) => e.type === "item.completed" && e.item.type === "agent_message");
  assert.ok(message, "an agent_message");
  assert.ok(!message.item.text.includes("<tool_call>"), "no tool markup in the answer");
  const done = events.find((e) => e.type === "turn.completed");
  assert.ok(done, "turn.completed");
  const after = {
    prompt: await metric("pistil_prompt_tokens_total"),
    generated: await metric("pistil_tokens_predicted_total"),
    responses: await metric('pistil_requests_total{endpoint="responses",status="200"}'),
  };
  assert.equal(after.responses - before.responses, 1, "one Responses request");
  assert.equal(done.usage.input_tokens, after.prompt - before.prompt, "Codex's input tokens == the server's");
  assert.equal(done.usage.output_tokens, after.generated - before.generated, "Codex's output tokens == the server's");
  console.log(`ok   codex exec over wire_api = "responses" (${done.usage.input_tokens} prompt tokens, answer of ${done.usage.output_tokens} tokens)`);
} catch (err) {
  failed = 1;
  console.log(`FAIL codex exec: ${err && err.stack ? err.stack : err}`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
console.log(`${1 - failed} passed, ${failed} failed`);
process.exit(failed);
