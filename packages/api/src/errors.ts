/** Stable error codes of the Warren API; every one has an HTTP status in {@link STATUS_BY_CODE}. */
export const ERROR_CODES = [
  'invalid_argument',
  'unauthenticated',
  'permission_denied',
  'not_found',
  'conflict',
  'payload_too_large',
  'resource_exhausted',
  'deadline_exceeded',
  'unavailable',
  'internal',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** HTTP status of each error code: the compiler forces every code to have one. */
export const STATUS_BY_CODE: Record<ErrorCode, number> = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  resource_exhausted: 429,
  deadline_exceeded: 504,
  unavailable: 503,
  internal: 500,
};

export type ErrorDetails = Record<string, unknown>;

/** The one error class of Warren, on the server and in the SDK alike. */
export class WarrenError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WarrenError';
    this.code = code;
    this.details = details;
  }

  get status(): number {
    return STATUS_BY_CODE[this.code];
  }
}

/** The wire form of an error: `{"error": {"code", "message", "details"}}`. */
export interface ErrorBody {
  error: { code: ErrorCode; message: string; details: ErrorDetails };
}

/** Serializes any thrown value to the wire; unknown errors become `internal` with no stack. */
export function serializeError(err: unknown): { status: number; body: ErrorBody } {
  const e = err instanceof WarrenError ? err : new WarrenError('internal', 'internal error');
  return { status: e.status, body: { error: { code: e.code, message: e.message, details: e.details } } };
}

function isErrorCode(v: unknown): v is ErrorCode {
  return typeof v === 'string' && (ERROR_CODES as readonly string[]).includes(v);
}

/** Rebuilds a WarrenError from a response status and body (the SDK side of {@link serializeError}). */
export function parseError(status: number, body: unknown): WarrenError {
  if (typeof body === 'object' && body !== null && 'error' in body) {
    const e = (body as { error: unknown }).error;
    if (typeof e === 'object' && e !== null) {
      const { code, message, details } = e as { code?: unknown; message?: unknown; details?: unknown };
      if (isErrorCode(code)) {
        const d = typeof details === 'object' && details !== null ? (details as ErrorDetails) : {};
        return new WarrenError(code, typeof message === 'string' ? message : code, d);
      }
    }
  }
  const byStatus = ERROR_CODES.find((c) => STATUS_BY_CODE[c] === status) ?? 'internal';
  return new WarrenError(byStatus, `HTTP ${status}`);
}
