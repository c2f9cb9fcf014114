// SPDX-License-Identifier: LGPL-2.1-or-later
// A sandbox's end at its deadline: create(args.template, args.opts), then sandbox.setTimeout(
// args.setTimeoutMs) if given; then Sandbox.getInfo(id) every 250 ms until it throws or
// args.withinMs pass. {sandboxId, first (the first getInfo), goneAfterMs (since the deadline was
// set; null if it never went), last (what the last getInfo gave), runningAfter (isRunning())}.
import { Sandbox, args, attempt, create, main } from './common.mjs';

main(async () => {
        const sbx = await create(args.template, args.opts);
        if (args.setTimeoutMs !== undefined)
                await sbx.setTimeout(args.setTimeoutMs);
        const set = Date.now();
        let first, last, goneAfterMs = null;
        while (Date.now() - set < args.withinMs) {
                last = await attempt(() => Sandbox.getInfo(sbx.sandboxId));
                first ??= last;
                if (last.error) {
                        goneAfterMs = Date.now() - set;
                        break;
                }
                await new Promise((resolve) => setTimeout(resolve, 250));
        }
        const runningAfter = await attempt(() => sbx.isRunning());
        return { sandboxId: sbx.sandboxId, first, goneAfterMs, last, runningAfter };
});
