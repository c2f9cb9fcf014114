// SPDX-License-Identifier: LGPL-2.1-or-later
// Sandbox.setTimeout(args.id, args.timeoutMs), then Sandbox.getInfo(args.id): {before, after,
// info} with the client's clock (ms) around setTimeout, or {error} when setTimeout threw.
import { Sandbox, args, attempt, main } from './common.mjs';

main(async () => {
        const before = Date.now();
        const set = await attempt(() => Sandbox.setTimeout(args.id, args.timeoutMs));
        const after = Date.now();
        if (set.error)
                return { error: set.error };
        return { before, after, info: await Sandbox.getInfo(args.id) };
});
