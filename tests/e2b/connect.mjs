// SPDX-License-Identifier: LGPL-2.1-or-later
// Sandbox.connect(args.id, {timeoutMs: args.timeoutMs}), then sandbox.getInfo() and
// sandbox.isRunning(): {sandboxId, before, after, info, running} with the client's clock (ms)
// around connect, or {error} when connect threw.
import { Sandbox, args, attempt, main } from './common.mjs';

main(async () => {
        const before = Date.now();
        const made = await attempt(() => Sandbox.connect(args.id, { timeoutMs: args.timeoutMs }));
        const after = Date.now();
        if (made.error)
                return { error: made.error };
        const sbx = made.value;
        const info = await sbx.getInfo();
        return { sandboxId: sbx.sandboxId, before, after, info, running: await sbx.isRunning() };
});
