// SPDX-License-Identifier: LGPL-2.1-or-later
// What every script of tests/e2b shares: the SDK loaded, unmodified, from the prefix that
// tools/install-e2b-sdk filled (SCOPEBOX_E2B_PREFIX, set by tests/integration/e2b_sdk.py), the
// script's arguments (one JSON object, argv[2]) and its one line of output. The SDK reads
// E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL from the environment, as a user's program does.
import { createRequire } from 'node:module';
import path from 'node:path';

const prefix = process.env.SCOPEBOX_E2B_PREFIX;
if (!prefix) {
        console.log(JSON.stringify({ fatal: { name: 'Setup', message: 'SCOPEBOX_E2B_PREFIX is not set' } }));
        process.exit(2);
}
const require = createRequire(path.join(prefix, 'node_modules', '.scopebox-test'));

export const args = JSON.parse(process.argv[2] || '{}');

// The package the script drives: "e2b" (default) or "@e2b/code-interpreter", whose Sandbox
// extends e2b's. Both are loaded through require(), so they share one e2b.
export const e2b = require('e2b');
export const Sandbox = (args.package ? require(args.package) : e2b).Sandbox;
export const version = require('e2b/package.json').version;

// Every sandbox id the script saw created, reported even when the script fails half-way, so
// that the test's finaliser kills it.
export const created = [];

// Sandbox.create(template, opts), or Sandbox.create(opts) (the package's default template) when
// template is null or undefined.
export async function create(template, opts) {
        const sbx = template != null ? await Sandbox.create(template, opts) : await Sandbox.create(opts);
        created.push(sbx.sandboxId);
        return sbx;
}

// An error as the test compares it: the SDK's class name (never its text), its HTTP status
// where the SDK keeps one, and the message for the failure report.
export function errorOf(e) {
        return { name: e?.name, statusCode: e?.statusCode, message: String(e?.message ?? e) };
}

// What a call returned, or the error it threw.
export async function attempt(fn) {
        try {
                return { value: await fn() };
        } catch (e) {
                return { error: errorOf(e) };
        }
}

export function emit(result) {
        console.log(JSON.stringify({ version, created, ...result }));
        process.exit(0);
}

// Runs the script's body; whatever it throws ends the script with {"fatal": ...} and status 1.
export async function main(body) {
        try {
                emit(await body());
        } catch (e) {
                console.log(JSON.stringify({ version, created, fatal: errorOf(e) }));
                process.exit(1);
        }
}
