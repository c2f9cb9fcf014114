// SPDX-License-Identifier: LGPL-2.1-or-later
// files.watchDir of the SDK (envd's WatchDir stream) on a code-interpreter sandbox: the events of
// changes made through the SDK and by the sandbox's code, recursive or not, a watch's end (stop,
// its timeout, its directory removed, the sandbox killed) and the refusals. Prints
// {sandboxId, ...each step's value or error}.
import { args, attempt, create, errorOf, main } from './common.mjs';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Waits until ok() holds, for at most 'ms' (generous: the server looks twice a second).
async function until(ok, ms = 15000) {
        for (let waited = 0; !ok() && waited < ms; waited += 100)
                await sleep(100);
        return ok();
}

// A watch whose events and end are recorded.
async function watch(files, path, opts = {}) {
        const w = { events: [], exit: undefined };
        w.handle = await files.watchDir(path, (e) => { w.events.push(`${e.type} ${e.name}`); }, {
                ...opts,
                onExit: (err) => { w.exit = err ? errorOf(err) : 'clean'; },
        });
        w.saw = (event) => w.events.includes(event);
        return w;
}

main(async () => {
        const sbx = await create(null, args.opts);
        const files = sbx.files;
        const out = { sandboxId: sbx.sandboxId };

        await files.makeDir('w/sub');
        await files.makeDir('w/gone');
        const w = await watch(files, 'w');
        await files.write('w/a.txt', 'x');
        await files.makeDir('w/d');
        await sbx.runCode("open('/home/user/w/b.txt', 'w').write('from code')");
        await files.write('w/sub/deep.txt', 'not seen: not recursive');
        out.sawCreated = await until(() =>
                ['create a.txt', 'create d', 'create b.txt', 'write b.txt'].every(w.saw));
        await files.write('w/a.txt', 'longer now');
        out.written = await until(() => w.saw('write a.txt'));
        await files.remove('w/a.txt');
        await files.rename('w/b.txt', 'w/c.txt');
        out.removed = await until(() => ['remove a.txt', 'remove b.txt', 'create c.txt'].every(w.saw));
        await w.handle.stop();
        out.stopped = await until(() => w.exit !== undefined);
        out.events = w.events;
        out.exit = w.exit;

        const r = await watch(files, '/workspace/w', { recursive: true });
        await files.write('w/sub/x.txt', 'deep');
        out.recursive = await until(() => r.saw('create sub/x.txt'));
        await r.handle.stop();

        // The watched directory removed: the stream ends with not_found.
        const g = await watch(files, 'w/gone');
        await files.remove('w/gone');
        out.goneEnded = await until(() => g.exit !== undefined);
        out.goneExit = g.exit;

        // Its timeout (Connect-Timeout-Ms): the watch ends, the SDK calls onExit with a TimeoutError.
        const t = await watch(files, 'w', { timeoutMs: 1500 });
        out.timeoutEnded = await until(() => t.exit !== undefined);
        out.timeoutExit = t.exit;

        out.missing = await attempt(() => files.watchDir('nope', () => {}));
        out.file = await attempt(() => files.watchDir('w/c.txt', () => {}));
        out.outside = await attempt(() => files.watchDir('/etc', () => {}));
        await sbx.runCode("import os\nos.symlink('/etc', 'etc')");
        out.link = await attempt(() => files.watchDir('etc', () => {}));
        out.root = await attempt(() => files.watchDir('w', () => {}, { user: 'root' }));

        // The sandbox killed under a watch: it ends.
        const k = await watch(files, 'w');
        await sbx.kill();
        out.killEnded = await until(() => k.exit !== undefined);
        out.killExit = k.exit;
        return out;
});
