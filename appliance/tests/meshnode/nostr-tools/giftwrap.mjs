// nostr-tools' NIP-59, driven by the gift-wrap interop test (appliance/tests/meshnode/giftwrap.rs):
//   node giftwrap.mjs NPM_DIR wrap SENDER_SECRET_HEX RECIPIENT_PUBKEY_HEX CONTENT  -> the wrap event
//   node giftwrap.mjs NPM_DIR unwrap RECIPIENT_SECRET_HEX WRAP_FILE                -> the rumor
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const [, , npmDir, mode, ...rest] = process.argv;
const require = createRequire(`${npmDir}/package.json`);
const nip59 = require('nostr-tools/nip59');
const bytes = (hex) => Uint8Array.from(hex.match(/../g).map((b) => parseInt(b, 16)));

if (mode === 'wrap') {
  const [secret, recipient, content] = rest;
  const rumor = { kind: 14, content, tags: [], created_at: Math.floor(Date.now() / 1000) };
  console.log(JSON.stringify(nip59.wrapEvent(rumor, bytes(secret), recipient)));
} else if (mode === 'unwrap') {
  const [secret, file] = rest;
  const wrap = JSON.parse(readFileSync(file, 'utf8'));
  console.log(JSON.stringify(nip59.unwrapEvent(wrap, bytes(secret))));
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
