// Compiled with tsc --strict --noEmit: the package's types describe its API.
import {Client, LoopResult, failureFromError, failureFromResponse, failureFromStatus} from 'failoverd-client';

async function serve(client: Client): Promise<string> {
  const result: LoopResult<string> = await client.run<string>('assistant-llm', async (attempt, ctx) => {
    if (ctx.number > 3 || attempt.upstream_model === '') return {ok: false, failure: failureFromStatus(429, 'slow down', 2)};
    try {
      return {ok: true, response: `${attempt.target}:${attempt.labels['base_url'] ?? ''}`, latencyMs: 12};
    } catch (err) {
      return {ok: false, failure: failureFromError(err)};
    }
  }, {timeoutMs: 30000, sessionKey: 'user-1', signal: new AbortController().signal});
  if (!result.ok) throw new Error(result.error);
  const failure = failureFromResponse(503, {'retry-after': '3'}, 'busy');
  return `${result.servedBy} ${result.response ?? ''} ${failure.http_status ?? 0} ${client.bufferedReports}`;
}

const client = new Client({server: '127.0.0.1:50051', token: 't', timeoutMs: 1000});
void serve(client).finally(() => client.close());
