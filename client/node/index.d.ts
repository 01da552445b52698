// Types for failoverd-client. Messages follow failover.v1 as @grpc/proto-loader
// gives them: field names as in the .proto, enums as their names, durations as
// {seconds, nanos}.

export interface Duration { seconds: number; nanos?: number }

export type TransportError = 'TRANSPORT_ERROR_UNSPECIFIED' | 'TRANSPORT_ERROR_CONNECT_REFUSED' | 'TRANSPORT_ERROR_DNS'
  | 'TRANSPORT_ERROR_RESET' | 'TRANSPORT_ERROR_TLS' | 'TRANSPORT_ERROR_TIMEOUT';
export type Phase = 'PHASE_UNSPECIFIED' | 'PHASE_BEFORE_RESPONSE' | 'PHASE_AFTER_FIRST_BYTE' | 'PHASE_AFTER_SIDE_EFFECT';
export type Verdict = 'VERDICT_UNSPECIFIED' | 'VERDICT_DONE' | 'VERDICT_RETRY_SAME' | 'VERDICT_TRY_NEXT' | 'VERDICT_FAIL';

/** The facts of a failed attempt (failover.v1.Failure). Give what you know; failoverd classifies. */
export interface Failure {
  http_status?: number;
  grpc_code?: number;
  transport_error?: TransportError;
  message?: string;
  error_code?: string;
  retry_after?: Duration;
  phase?: Phase;
  admission_rejected?: boolean;
  cancelled?: boolean;
  response?: { headers?: Record<string, string>; body?: Buffer | Uint8Array };
}

/** One attempt of a plan (failover.v1.Attempt). */
export interface Attempt {
  target: string;
  /** The model name to send upstream. */
  upstream_model: string;
  labels: Record<string, string>;
  /** Per-attempt timeout from the target's config; null when none was given. */
  timeout: Duration | null;
  max_retries: number;
  /** 0-based index of the target in the chain's declared list. */
  position: number;
  health: string;
}

export interface AttemptContext {
  /** 1-based within the request, retries included. */
  number: number;
  /** Date.now() past which nothing should start; null without a timeout. */
  deadline: number | null;
  signal?: AbortSignal;
}

export interface AttemptOutcome<R = unknown> {
  ok: boolean;
  failure?: Failure;
  latencyMs?: number;
  /** Handed back as LoopResult.response from the attempt that served the request. */
  response?: R;
}

export interface AttemptRecord {
  target: string;
  number: number;
  ok: boolean;
  /** VERDICT_UNSPECIFIED when failoverd was not reached. */
  verdict: Verdict;
  reason: string;
  latencyMs?: number;
}

export interface LoopResult<R = unknown> {
  ok: boolean;
  servedBy: string;
  response?: R;
  error: string;
  attempts: AttemptRecord[];
  /** Some or all of the loop ran without failoverd. */
  failStatic: boolean;
}

export interface ClientOptions {
  /** host:port, default 127.0.0.1:50051. */
  server?: string;
  /** Sent as "authorization: Bearer <token>". */
  token?: string;
  /** PEM files; TLS is on when any is set. */
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  /** Deadline of each call to failoverd, default 5000. */
  timeoutMs?: number;
  /** Reports kept while failoverd is away (oldest dropped), default 1000. */
  maxBufferedReports?: number;
  flushIntervalMs?: number;
  /** After failoverd did not answer, ask it again after this (doubling up to maxDownBackoffMs). */
  downBackoffMs?: number;
  maxDownBackoffMs?: number;
}

export interface RunOptions {
  bodyBytes?: number;
  sessionKey?: string;
  requestId?: string;
  excludeTargets?: string[];
  /** For the whole request: no attempt starts and no retry delay is waited out past it. */
  timeoutMs?: number;
  /** Stops the loop before its next attempt or wait. */
  signal?: AbortSignal;
}

export class Client {
  constructor(options?: ClientOptions);
  run<R = unknown>(chain: string, attempt: (attempt: Attempt, context: AttemptContext) => Promise<AttemptOutcome<R>>,
                   options?: RunOptions): Promise<LoopResult<R>>;
  setDeclaredOrder(chain: string, targets: string[]): void;
  flush(): Promise<number>;
  readonly bufferedReports: number;
  readonly droppedReports: number;
  /** Sends the reports not sent yet (for at most flushTimeoutMs, default 2000), then closes the channel. */
  close(flushTimeoutMs?: number): Promise<void>;
}

export function failureFromResponse(status: number, headers?: Record<string, string> | Map<string, string>
  | Iterable<[string, string]> | { entries(): Iterable<[string, string]> }, body?: string | Buffer): Failure;
export function failureFromStatus(status: number, message?: string, retryAfterSeconds?: number): Failure;
export function failureFromError(err: unknown, afterFirstByte?: boolean): Failure;
