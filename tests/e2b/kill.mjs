// SPDX-License-Identifier: LGPL-2.1-or-later
// A sandbox's end by kill: create(args.template, args.opts), isRunning(), kill(), kill() again,
// isRunning(), Sandbox.getInfo(id): {sandboxId, runningBefore, kill, killAgain, runningAfter, infoAfter}.
import { Sandbox, args, attempt, create, main } from './common.mjs';

main(async () => {
        const sbx = await create(args.template, args.opts);
        const runningBefore = await attempt(() => sbx.isRunning());
        const kill = await attempt(() => sbx.kill());
        const killAgain = await attempt(() => sbx.kill());
        const runningAfter = await attempt(() => sbx.isRunning());
        const infoAfter = await attempt(() => Sandbox.getInfo(sbx.sandboxId));
        return { sandboxId: sbx.sandboxId, runningBefore, kill, killAgain, runningAfter, infoAfter };
});
