// SPDX-License-Identifier: LGPL-2.1-or-later
// Sandbox.getInfo(args.id): {info} or {error}.
import { Sandbox, args, attempt, main } from './common.mjs';

main(async () => {
        const got = await attempt(() => Sandbox.getInfo(args.id));
        return got.error ? { error: got.error } : { info: got.value };
});
