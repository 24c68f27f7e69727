// Retry an async operation with exponential backoff and jitter.

export interface RetryOptions {
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  retryOn?: (error: unknown) => boolean;
}

const DEFAULTS: RetryOptions = {
  attempts: 5,
  baseDelayMs: 200,
  maxDelayMs: 10_000,
};

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function backoffDelay(attempt: number, opts: RetryOptions): number {
  const exp = opts.baseDelayMs * 2 ** attempt;
  const capped = Math.min(exp, opts.maxDelayMs);
  return Math.floor(capped / 2 + Math.random() * (capped / 2));
}

export async function withRetry<T>(
  operation: () => Promise<T>,
  options: Partial<RetryOptions> = {},
): Promise<T> {
  const opts = { ...DEFAULTS, ...options };
  let lastError: unknown;
  for (let attempt = 0; attempt < opts.attempts; attempt++) {
    try {
      return await operation();
    } catch (error) {
      lastError = error;
      if (opts.retryOn && !opts.retryOn(error)) {
        throw error;
      }
      if (attempt < opts.attempts - 1) {
        await sleep(backoffDelay(attempt, opts));
      }
    }
  }
  throw lastError;
}

export class CircuitBreaker {
  private failures = 0;
  private openedAt = 0;

  constructor(
    private readonly threshold: number = 5,
    private readonly coolDownMs: number = 30_000,
  ) {}

  get isOpen(): boolean {
    if (this.failures < this.threshold) {
      return false;
    }
    return Date.now() - this.openedAt < this.coolDownMs;
  }

  async call<T>(operation: () => Promise<T>): Promise<T> {
    if (this.isOpen) {
      throw new Error("circuit open");
    }
    try {
      const result = await operation();
      this.failures = 0;
      return result;
    } catch (error) {
      this.failures += 1;
      if (this.failures >= this.threshold) {
        this.openedAt = Date.now();
      }
      throw error;
    }
  }
}
