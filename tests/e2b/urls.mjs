// SPDX-License-Identifier: LGPL-2.1-or-later
// Signed file URLs as the SDK makes them (downloadUrl, uploadUrl) for a sandbox addressed by host
// (E2B_DOMAIN, no E2B_SANDBOX_URL): the URLs and the sandbox, which the test then uses over plain
// HTTP as a browser behind the TLS terminator would (docs/e2b.md "Host routing").
import { args, create, main } from './common.mjs';

main(async () => {
        const sbx = await create('base', { timeoutMs: 120_000 });
        return {
                sandboxId: sbx.sandboxId,
                envdAccessToken: sbx.envdAccessToken,
                download: await sbx.downloadUrl(args.path),
                upload: await sbx.uploadUrl(args.path),
                expired: await sbx.downloadUrl(args.path, { useSignatureExpiration: -10 }),
                expiring: await sbx.downloadUrl(args.path, { useSignatureExpiration: 600 }),
                other: await sbx.downloadUrl('other.txt'),
        };
});
