// Types of `admin` (bindings-node/lib/admin.js), re-exported by index.d.ts.
import type { IncomingMessage, ServerResponse } from 'node:http';

import type { App } from './index';

/** How an admin is set up. */
export interface AdminOptions {
  /**
   * What every route but `/health` needs: typed into the page's login form
   * (posted, never in a URL, and traded for a session cookie) or sent as
   * `Authorization: Bearer <token>`. Omitted, null or empty: one is
   * generated (256 random bits, base64url) and, unless `announce` is false,
   * printed to stderr, since nobody could get in without it. Under 16
   * characters: a RangeError.
   */
  token?: string | null;
  /** Refuse every change (send, revoke, re-queueing or purging dead letters) with 403: a page to look at (Bull Board's read-only mode). Default false. */
  readOnly?: boolean;
  /**
   * The largest request body, in bytes: 64 KiB by default (the core's
   * `MAX_BODY`; a send's args are a few values typed into a form). A longer
   * body is answered 413 and not read to its end.
   */
  maxBody?: number | null;
  /**
   * Origins besides the page's own host (`https://ops.example.com`) whose
   * pages may make changes with the session cookie. Compared exactly, never
   * as patterns (Flower's unanchored regex, CVE-2022-30034). Default none.
   */
  allowedOrigins?: readonly string[];
  /** Print a generated token to stderr. Default true. */
  announce?: boolean;
}

/**
 * A `(req, res)` handler serving one app's admin: the page, its JSON API,
 * sending and revoking, and a live stream of counts. Use it as
 * `http.createServer(handler)` or `express().use('/admin', handler)` (before
 * any body parser, or after one that leaves a Buffer).
 */
export interface AdminHandler {
  (req: IncomingMessage, res: ServerResponse, next?: (err?: unknown) => void): void;
  /** The token: the one given, or the one generated. */
  readonly token: string;
  /** Whether the token was generated (no `token` was given). */
  readonly tokenGenerated: boolean;
  /** Whether every change is refused. */
  readonly readOnly: boolean;
  /** The largest body read, in bytes. */
  readonly maxBody: number;
  /** How many live streams are open now. */
  readonly openStreams: number;
  /**
   * Ends every open live stream (each within a tick, under a second). A
   * stream never ends by itself, so call it before `server.close()` when
   * pages may be open.
   */
  closeStreams(): void;
}

/** The admin interface. */
export declare const admin: {
  /**
   * A `(req, res)` handler over `app`. Every rule — routes, the token
   * (compared in constant time), CSRF and origin checks, validation,
   * escaping, CSP and the page itself — is the core's, the same as
   * Python's `headway.admin.asgi`. Throws TypeError or RangeError naming a
   * bad option.
   */
  handler(app: App, options?: AdminOptions): AdminHandler;
};
