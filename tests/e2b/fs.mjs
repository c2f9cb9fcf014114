// SPDX-License-Identifier: LGPL-2.1-or-later
// The SDK's files.list/exists/getInfo/makeDir/rename/remove (envd's filesystem RPCs) on
// a code-interpreter sandbox, and what a process of the sandbox tries against them: links to "/"
// and /etc, "..", a huge directory. Prints {sandboxId, ...each step's value or error}.
import { args, attempt, create, main } from './common.mjs';

// A cell's last expression as JSON, or its error.
async function cell(sbx, code) {
        const x = await sbx.runCode(code);
        if (x.error)
                return { error: { name: x.error.name, message: x.error.value } };
        return { value: x.results[0]?.json ?? x.results[0]?.text };
}

const names = (entries) => entries.map((e) => e.name);

main(async () => {
        const sbx = await create(null, args.opts);
        const files = sbx.files;
        const out = { sandboxId: sbx.sandboxId };

        // What envd serves, as the SDK documents it.
        out.write = await attempt(() => files.write('t/a.txt', 'hello'));
        out.makeDir = await attempt(() => files.makeDir('t/sub/deep'));
        out.makeDirAgain = await attempt(() => files.makeDir('/home/user/t/sub/deep'));
        out.makeDirOnFile = await attempt(() => files.makeDir('t/a.txt'));
        out.exists = await attempt(() => files.exists('t/a.txt'));
        out.existsDir = await attempt(() => files.exists('~/t/sub'));
        out.existsNot = await attempt(() => files.exists('t/nope'));
        out.existsUnderFile = await attempt(() => files.exists('t/a.txt/x'));
        out.info = await attempt(() => files.getInfo('t/a.txt'));
        out.infoDir = await attempt(() => files.getInfo('/workspace/t/sub'));
        out.infoHome = await attempt(() => files.getInfo('/home/user'));
        out.infoMissing = await attempt(() => files.getInfo('t/nope'));
        out.list = await attempt(async () => names(await files.list('t')));
        out.listDeep = await attempt(async () =>
                (await files.list('/home/user/t', { depth: 3 })).map((e) => e.path));
        out.listEntries = await attempt(() => files.list('t'));
        out.listDepth0 = await attempt(() => files.list('t', { depth: 0 }));
        out.listFile = await attempt(() => files.list('t/a.txt'));
        out.listMissing = await attempt(() => files.list('t/nope'));
        out.rename = await attempt(() => files.rename('t/a.txt', 't/sub/b.txt'));
        out.renameMissing = await attempt(() => files.rename('t/nope', 't/nope2'));
        out.renameAcross = await attempt(() => files.rename('/workspace/t/sub/b.txt', 'moved/c.txt'));
        // args.basic: the SDK's calls alone (e2b@2.50.0 comes without the code interpreter).
        if (!args.basic)
                out.seen = await cell(sbx,
                        "import os\n[open('/home/user/moved/c.txt').read(), sorted(os.listdir('t/sub')), " +
                        "os.path.isdir('/workspace/t/sub/deep')]");
        out.remove = await attempt(() => files.remove('t/sub'));
        out.removeMissing = await attempt(() => files.remove('never/was'));
        out.afterRemove = await attempt(() => files.exists('t/sub'));
        out.removeRoot = await attempt(() => files.remove('/home/user'));
        if (args.basic) {
                await sbx.kill();
                return out;
        }

        // What a process of the sandbox leaves for the API to trip over.
        out.setup = await cell(sbx,
                "import os\nos.symlink('/', 'root'); os.symlink('/etc', 'etc'); os.symlink('../../..', 'up')\n" +
                "os.symlink('/workspace/t', 'inside'); os.symlink('t', 'rel')\n" +
                "os.symlink('/nowhere', 'dangling')\n" +
                "open('t/in.txt', 'w').write('in')\n" +
                "os.makedirs('big', exist_ok=True)\n" +
                "for i in range(4000): open(f'big/f{i:05d}', 'w').close()\n" +
                "len(os.listdir('big'))");
        out.statLink = await attempt(() => files.getInfo('etc'));
        out.statDangling = await attempt(() => files.getInfo('dangling'));
        out.listLinkEtc = await attempt(() => files.list('etc'));
        out.listLinkRoot = await attempt(() => files.list('root'));
        out.listLinkUp = await attempt(() => files.list('up'));
        out.listLinkInside = await attempt(async () => names(await files.list('inside')));
        out.listLinkRel = await attempt(async () => names(await files.list('rel')));
        out.listTop = await attempt(async () => names(await files.list('/home/user')));
        // Depth first in name order: big/ comes first and fills the listing (never printed whole:
        // it would not fit the pipe's buffer).
        out.listTopDeep = await attempt(async () => {
                const entries = await files.list('/home/user', { depth: 4 });
                return { n: entries.length, first: entries[0]?.path, last: entries.at(-1)?.path };
        });
        out.statThrough = await attempt(() => files.getInfo('etc/passwd'));
        out.existsThrough = await attempt(() => files.exists('root/etc/shadow'));
        out.makeDirThrough = await attempt(() => files.makeDir('etc/scopebox-x'));
        out.makeDirThroughRoot = await attempt(() => files.makeDir('root/tmp/scopebox-x'));
        out.renameOut = await attempt(() => files.rename('etc/passwd', 'stolen'));
        out.renameIn = await attempt(() => files.rename('t/in.txt', 'etc/in.txt'));
        out.renameRootIn = await attempt(() => files.rename('t/in.txt', 'up/tmp/in.txt'));
        out.removeThrough = await attempt(() => files.remove('root/etc/hostname'));
        out.removeLink = await attempt(() => files.remove('etc'));
        out.renameLink = await attempt(() => files.rename('root', 'root2'));
        out.after = await cell(sbx,
                "import os\n[os.path.lexists('etc'), os.path.exists('/etc/passwd'), " +
                "os.path.exists('/etc/hostname'), " +
                "os.readlink('root2'), os.path.exists('t/in.txt'), os.path.exists('/etc/scopebox-x')]");
        out.outside = await attempt(() => files.list('/etc'));
        out.outsideStat = await attempt(() => files.exists('/etc/passwd'));
        out.dotdot = await attempt(() => files.list('../..'));
        out.dotdotHome = await attempt(() => files.exists('/home/user/../../etc/passwd'));
        out.removeOutside = await attempt(() => files.remove('/tmp'));
        out.nul = await attempt(() => files.exists('a\u0000b'));
        out.loneSurrogate = await attempt(() => files.exists('a\ud800b'));
        out.big = await attempt(async () => {
                const entries = await files.list('big');
                return { n: entries.length, first: entries[0]?.name, last: entries.at(-1)?.name };
        });
        out.root = await attempt(() => files.list('t', { user: 'root' }));
        await sbx.kill();
        out.afterKill = await attempt(() => files.list('t'));
        return out;
});
