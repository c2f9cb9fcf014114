// SPDX-License-Identifier: LGPL-2.1-or-later
// files.write / files.read of the SDK (envd's /files) on a code-interpreter sandbox, and what
// runCode sees of them: {sandboxId, ...each step's value or error}.
import { args, attempt, create, main } from './common.mjs';

main(async () => {
        const sbx = await create(null, args.opts);
        const out = { sandboxId: sbx.sandboxId };
        out.write = await attempt(() => sbx.files.write('notes/a.txt', 'héllo\n'));
        out.readText = await attempt(() => sbx.files.read('/home/user/notes/a.txt'));
        out.readTilde = await attempt(() => sbx.files.read('~/notes/a.txt'));
        const bytes = new Uint8Array([0, 1, 2, 255, 10, 13]);
        out.writeBytes = await attempt(() => sbx.files.write('/home/user/b.bin', bytes.buffer));
        out.readBytes = await attempt(async () => Array.from(await sbx.files.read('b.bin', { format: 'bytes' })));
        out.writeMany = await attempt(() => sbx.files.write([
                { path: 'm/1.txt', data: 'one' }, { path: '/home/user/m/2.txt', data: 'two' },
        ]));
        out.missing = await attempt(() => sbx.files.read('nope.txt'));
        out.outside = await attempt(() => sbx.files.read('/etc/passwd'));
        out.escape = await attempt(() => sbx.files.write('../../etc/x', 'x'));
        out.code = await attempt(async () => {
                const x = await sbx.runCode(
                        "import os\nopen('made.txt', 'w').write('from code')\n" +
                        "[open('/home/user/notes/a.txt').read(), open('m/2.txt').read(), os.getcwd()]");
                return x.results[0]?.json ?? x.error;
        });
        out.readMade = await attempt(() => sbx.files.read('made.txt'));
        await sbx.kill();
        out.afterKill = await attempt(() => sbx.files.read('made.txt'));
        return out;
});
