// A chat completion through failoverd with the openai SDK: failoverd picks the
// upstream, the SDK makes the call, failoverd hears what happened.
//   node openai_chat.js --server 127.0.0.1:50051 --chain assistant-llm
// Each target of the chain names its OpenAI-compatible endpoint in the label
// base_url and its model in upstream_model.
'use strict';
const OpenAI = require('openai');
const {Client, failureFromError, failureFromResponse} = require('failoverd-client');

async function chat(client, chain, prompt) {
  const result = await client.run(chain, async (target, ctx) => {
    const openai = new OpenAI({baseURL: target.labels.base_url, apiKey: process.env.UPSTREAM_API_KEY || 'none',
      maxRetries: 0});  // failoverd decides whether to retry, and where
    const started = Date.now();
    try {
      const completion = await openai.chat.completions.create(
          {model: target.upstreamModel, messages: [{role: 'user', content: prompt}]}, {signal: ctx.signal});
      return {ok: true, response: completion.choices[0].message.content, latencyMs: Date.now() - started};
    } catch (err) {
      // An HTTP error reply (err.status), or no reply at all: refused, DNS, reset, TLS, timeout.
      const failure = err instanceof OpenAI.APIError && err.status
        ? failureFromResponse(err.status, err.headers, err.error) : failureFromError(err);
      return {ok: false, failure};
    }
  }, {timeoutMs: 60000});
  for (const a of result.attempts) console.error(`  ${a.target}: ${a.ok ? 'ok' : a.reason} -> ${a.verdict}`);
  if (!result.ok) throw new Error(result.error);
  return `${result.servedBy}: ${result.response}`;
}

async function main() {
  const arg = (name, fallback) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : fallback);
  const client = new Client({server: arg('--server', '127.0.0.1:50051'), token: process.env.FAILOVERD_TOKEN});
  try {
    console.log(await chat(client, arg('--chain', 'assistant-llm'), 'Say hello.'));
  } finally {
    await client.close();
  }
}

main().catch((err) => { console.error(err.message); process.exit(1); });
