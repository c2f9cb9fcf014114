// SPDX-License-Identifier: LGPL-2.1-or-later
// Sandbox.create(args.template, args.opts), then sandbox.getInfo(): {sandboxId, before, after,
// info} with the client's clock (ms) around the create, or {error} when create threw.
import { args, attempt, create, main } from './common.mjs';

main(async () => {
        const before = Date.now();
        const made = await attempt(() => create(args.template, args.opts));
        const after = Date.now();
        if (made.error)
                return { error: made.error };
        const sbx = made.value;
        return { sandboxId: sbx.sandboxId, before, after, info: await sbx.getInfo() };
});
