// Types for failoverd-client. One convention throughout: camelCase names,
// times in milliseconds, enums as the names of failover.v1's values.

export type TransportError = 'TRANSPORT_ERROR_UNSPECIFIED' | 'TRANSPORT_ERROR_CONNECT_REFUSED' | 'TRANSPORT_ERROR_DNS'
  | 'TRANSPORT_ERROR_RESET' | 'TRANSPORT_ERROR_TLS' | 'TRANSPORT_ERROR_TIMEOUT';
export type Phase = 'PHASE_UNSPECIFIED' | 'PHASE_BEFORE_RESPONSE' | 'PHASE_AFTER_FIRST_BYTE' | 'PHASE_AFTER_SIDE_EFFECT';
export type Verdict = 'VERDICT_UNSPECIFIED' | 'VERDICT_DONE' | 'VERDICT_RETRY_SAME' | 'VERDICT_TRY_NEXT' | 'VERDICT_FAIL';

/** The facts of a failed attempt (failover.v1.Failure). Give what you know; failoverd classifies. */
export interface Failure {
  httpStatus?: number;
  grpcCode?: number;
  transportError?: TransportError;
  message?: string;
  errorCode?: string;
  retryAfterMs?: number;
  phase?: Phase;
  admissionRejected?: boolean;
  cancelled?: boolean;
  response?: { headers?: Record<string, string>; body?: Buffer | Uint8Array };
}

/** One attempt of a plan (failover.v1.Attempt). */
export interface Attempt {
  target: string;
  /** The model name to send upstream. */
  upstreamModel: string;
  labels: Record<string, string>;
  /** Per-attempt timeout from the target's config; null when none was given. */
  timeoutMs: number | null;
  maxRetries: number;
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
  /** Reports kept while failoverd is away (the oldest success dropped first), default 1000. */
  maxBufferedReports?: number;
  flushIntervalMs?: number;
  /** After failoverd did not answer, ask it again after this (doubling up to maxDownBackoffMs). */
  downBackoffMs?: number;
  maxDownBackoffMs?: number;
  /** Called for each failover, target seen down and fail-static request: for logs and metrics. */
  onEvent?: (event: ClientEvent) => void;
}

export interface ClientEvent {
  /** failover: moved from target to nextTarget; targetDown: a failure report found target down;
   *  failStatic: failoverd could not be reached, the request is served from the last plan (message says why). */
  kind: 'failover' | 'targetDown' | 'failStatic';
  chain: string;
  target: string;
  nextTarget: string;
  reason: string;
  message: string;
}

/** Thrown by run() when failoverd refuses the call; `code` is the gRPC status code. */
export class FailoverdError extends Error {
  code: number;
}
/** failoverd could not be reached and no plan for the chain was seen to serve from. */
export class FailoverdUnreachable extends FailoverdError {
  address: string;
  cause: string;
}
/** The token is missing, wrong, or not allowed this call. */
export class Unauthenticated extends FailoverdError {}
/** failoverd has no chain of that name. */
export class UnknownChain extends FailoverdError {
  chain: string;
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

/** run() rejects with a TypeError naming any key it does not know (ClientOptions, RunOptions, Failure). */
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
  | Iterable<[string, string]> | { entries(): Iterable<[string, string]> }, body?: string | Buffer | Uint8Array | object): Failure;
export function failureFromStatus(status: number, message?: string, retryAfterMs?: number): Failure;
export function failureFromError(err: unknown, afterFirstByte?: boolean): Failure;

/** The failover.v1 package as the client loads it (camelCase fields), for calls the loop does not make. */
export function v1(): any;
/** The @grpc/grpc-js the client uses: make credentials for v1()'s stubs with it. */
export const grpc: typeof import('@grpc/grpc-js');
