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
// prompt, about 4K tokens. A first turn, then `codex exec resume --last` (Codex sends the
// first turn back as input items). Checks per turn: exit status 0; the answer arrives as
// Codex's agent_message; the usage Codex reports (input, cached, output tokens) equals what
// the server counted on /metrics; the resumed turn hit the prefix cache.
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
  const env = { PATH: process.env.PATH, HOME: home, CODEX_HOME: join(home, ".codex"), PISTIL_CODEX_KEY: apiKey };
  const counters = async () => ({
    prompt: await metric("pistil_prompt_tokens_total"),
    cached: await metric("pistil_prompt_cached_tokens_total"),
    generated: await metric("pistil_tokens_predicted_total"),
    responses: await metric('pistil_requests_total{endpoint="responses",status="200"}'),
  });
  // One turn, then the same session resumed: Codex sends the first turn's items back.
  // Codex reports the session's usage so far, so it is compared with the server's counts
  // since the session began.
  const start = await counters();
  for (const [turn, args] of [["first turn", ["exec", "--skip-git-repo-check", "--json", "-C", work, "Say hi."]],
    ["resumed turn", ["exec", "--skip-git-repo-check", "--json", "-C", work, "resume", "--last", "And now?"]]]) {
    const before = await counters();
    const run = spawnSync(codex, args, { env, input: "", encoding: "utf8", timeout: 240_000 });
    if (run.error) throw run.error;
    const events = run.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
    const fatal = events.filter((e) => e.type === "error" || e.type === "turn.failed");
    assert.equal(run.status, 0, `${turn}: codex exit status ${run.status}: ${JSON.stringify(fatal)} ${run.stderr.slice(-500)}`);
    const message = events.find((e) => e.type === "item.completed" && e.item.type === "agent_message");
    assert.ok(message, `${turn}: an agent_message`);
    assert.ok(!message.item.text.includes("<tool_call>"), "no tool markup in the answer");
    const done = events.find((e) => e.type === "turn.completed");
    assert.ok(done, `${turn}: turn.completed`);
    const after = await counters();
    assert.equal(after.responses - before.responses, 1, `${turn}: one Responses request`);
    assert.equal(done.usage.input_tokens, after.prompt - start.prompt, `${turn}: Codex's input tokens == the server's`);
    assert.equal(done.usage.cached_input_tokens, after.cached - start.cached, `${turn}: Codex's cached tokens == the server's`);
    assert.equal(done.usage.output_tokens, after.generated - start.generated, `${turn}: Codex's output tokens == the server's`);
    if (turn === "resumed turn") assert.ok(after.cached - before.cached > 0, "the prefix cache served the first turn");
    console.log(`ok   codex exec, ${turn}, over wire_api = "responses" (${after.prompt - before.prompt} prompt tokens, ${after.cached - before.cached} cached, answer of ${after.generated - before.generated} tokens)`);
  }
} catch (err) {
  failed = 1;
  console.log(`FAIL codex exec: ${err && err.stack ? err.stack : err}`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
console.log(`${failed ? 0 : 2} passed, ${failed} failed`);
process.exit(failed);
