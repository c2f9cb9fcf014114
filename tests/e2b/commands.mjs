// SPDX-License-Identifier: LGPL-2.1-or-later
// commands.run and the other process calls (envd's process RPCs, docs/e2b.md "Commands"), as the
// SDK's documentation shows them: foreground and background, streamed output, exit codes, cwd,
// envs, timeout, kill, list, connect(pid); and what is refused.
import { args, attempt, create, main } from './common.mjs';

main(async () => {
        const sbx = await create(args.template ?? 'base', { timeoutMs: 120_000, envs: { WIDE: 'sandbox', B: 'sandbox' } });
        const r = {};
        const chunks = [];

        r.echo = await attempt(async () => {
                const c = await sbx.commands.run('echo hello; echo oops >&2; pwd; echo "$HOME $USER"', {
                        onStdout: (d) => chunks.push(['out', d]),
                        onStderr: (d) => chunks.push(['err', d]),
                });
                return { stdout: c.stdout, stderr: c.stderr, exitCode: c.exitCode, error: c.error ?? null };
        });
        r.chunks = chunks;
        r.exit3 = await attempt(() => sbx.commands.run('echo partial; exit 3'));
        r.exit3Result = r.exit3.error ? null : r.exit3.value;
        try {
                await sbx.commands.run('echo partial; exit 3');
        } catch (e) {
                r.exit3Fields = { name: e.name, exitCode: e.exitCode, stdout: e.stdout, error: e.error };
        }
        r.cwdEnvs = await attempt(async () => {
                const c = await sbx.commands.run('pwd; echo "$A-$B"; ls', { cwd: '/tmp', envs: { A: '1', B: 'two words' } });
                return c.stdout;
        });
        // The sandbox's envs (create) for every command; the command's own win.
        r.sandboxEnvs = await attempt(async () =>
                (await sbx.commands.run('echo "$WIDE $B"', { envs: { B: 'command' } })).stdout);
        r.relative = await attempt(async () => {
                await sbx.commands.run('mkdir -p sub/dir && echo made > sub/dir/f');
                return (await sbx.commands.run('cat f; pwd', { cwd: 'sub/dir' })).stdout;
        });
        r.timeout = await attempt(() => sbx.commands.run('sleep 30', { timeoutMs: 1500 }));
        r.afterTimeout = await attempt(async () => (await sbx.commands.run('echo alive')).stdout);

        // Background: it runs on while listed; connect(pid) follows it; kill ends it.
        const bg = await sbx.commands.run('for i in $(seq 1 600); do echo tick $i; sleep 0.1; done', {
                background: true,
        });
        r.bgPid = bg.pid;
        r.list = (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args, cwd: p.cwd }));
        await bg.disconnect();
        await new Promise((res) => setTimeout(res, 500));
        r.listAfterDisconnect = (await sbx.commands.list()).map((p) => p.pid);
        const seen = [];
        const again = await sbx.commands.connect(bg.pid, { onStdout: (d) => seen.push(d) });
        await new Promise((res) => setTimeout(res, 600));
        r.killed = await sbx.commands.kill(bg.pid);
        r.waitKilled = await attempt(() => again.wait());
        r.reconnectSaw = seen.join('').includes('tick');
        r.killUnknown = await sbx.commands.kill(987654);
        r.listAfterKill = (await sbx.commands.list()).map((p) => p.pid);
        r.connectUnknown = await attempt(() => sbx.commands.connect(987654));
        r.root = await attempt(() => sbx.commands.run('id -u', { user: 'root' }));
        // stdin: what sendStdin gives, the command reads; closeStdin ends its input.
        r.stdin = await attempt(async () => {
                const h = await sbx.commands.run('cat; echo "[eof]"', { stdin: true, background: true });
                await sbx.commands.sendStdin(h.pid, 'line 1\n');
                await sbx.commands.sendStdin(h.pid, 'ünïcode\n');
                await sbx.commands.closeStdin(h.pid);
                return (await h.wait()).stdout;
        });
        r.noStdin = await attempt(async () => {
                const h = await sbx.commands.run('sleep 5', { background: true });
                try {
                        return await sbx.commands.sendStdin(h.pid, 'x');
                } finally {
                        await sbx.commands.kill(h.pid);
                }
        });
        r.notFound = await attempt(() => sbx.commands.run('no-such-command-here'));
        r.big = await attempt(async () => (await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" a')).stdout.length);
        // What a command is: the sandbox's user, no new privileges, the seccomp filter.
        r.identity = await attempt(async () =>
                (await sbx.commands.run('id -u; grep -E "^(NoNewPrivs|Seccomp):" /proc/self/status; ls -d /home/user/')).stdout);
        // Over the memory limit: the kernel's OOM killer ends it, the sandbox goes on.
        r.oom = await attempt(() =>
                sbx.commands.run('python3 -c "x = []\nwhile True: x.append(bytearray(10**7))"', { timeoutMs: 60_000 }));
        r.afterOom = await attempt(async () => (await sbx.commands.run('echo fine')).stdout);
        await sbx.kill();
        r.afterKill = await attempt(() => sbx.commands.run('echo x'));
        return r;
});
