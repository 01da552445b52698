// Compiled with tsc --strict --noEmit: the package's types describe its API.
import {Client, ClientEvent, FailoverdUnreachable, LoopResult, UnknownChain, failureFromError, failureFromResponse,
  failureFromStatus} from 'failoverd-client';

async function serve(client: Client): Promise<string> {
  const result: LoopResult<string> = await client.run<string>('assistant-llm', async (attempt, ctx) => {
    if (ctx.number > 3 || attempt.upstreamModel === '') return {ok: false, failure: failureFromStatus(429, 'slow down', 2000)};
    if ((attempt.timeoutMs ?? 0) > 60000) return {ok: false, failure: {httpStatus: 504, retryAfterMs: 100}};
    try {
      return {ok: true, response: `${attempt.target}:${attempt.labels['base_url'] ?? ''}`, latencyMs: 12};
    } catch (err) {
      return {ok: false, failure: failureFromError(err)};
    }
  }, {timeoutMs: 30000, sessionKey: 'user-1', signal: new AbortController().signal});
  if (!result.ok) throw new Error(result.error);
  const failure = failureFromResponse(503, {'retry-after': '3'}, 'busy');
  return `${result.servedBy} ${result.response ?? ''} ${failure.httpStatus ?? 0} ${client.bufferedReports}`;
}

const events: ClientEvent[] = [];
const client = new Client({server: '127.0.0.1:50051', token: 't', timeoutMs: 1000, onEvent: (e) => events.push(e)});
void serve(client).catch((err: unknown) => {
  if (err instanceof UnknownChain) return err.chain;
  if (err instanceof FailoverdUnreachable) return `${err.address}: ${err.cause}`;
  throw err;
}).finally(() => client.close());
// @ts-expect-error: options are camelCase, and a key the API does not know is refused
new Client({timeout_ms: 5});
