// make.mjs NPM_DIR COUNT SEED: COUNT invoices encoded and signed by the npm `bolt11`
// package, an independent BOLT #11 implementation, from seeded random fields; one JSON line
// each: the invoice and what was put in it, as `meshnode settle decode --json` names it.
import { createRequire } from 'node:module';

const [npm, countArg, seedArg] = process.argv.slice(2);
const require = createRequire(`${npm}/`);
const bolt11 = require(`${npm}/node_modules/bolt11`);

// xorshift64*: the same fields for the same seed
let state = BigInt(seedArg) | 1n;
const mask = (1n << 64n) - 1n;
function next() {
  state ^= state >> 12n;
  state ^= (state << 25n) & mask;
  state ^= state >> 27n;
  return (state * 2685821657736338717n) & mask;
}
const below = (n) => Number(next() % BigInt(n));
const randHex = (bytes) =>
  Array.from({ length: bytes }, () => below(256).toString(16).padStart(2, '0')).join('');

// BOLT #11's example key; the hop keys are points from the spec's examples
const priv = 'e126f68f7eafcc8b74f54d269fe206be715000f94dac067d1c04a8ca3b2db734';
const hops = [
  '029e03a901b85534ff1e92c43c74431f7ce72046060fcf7a95c37e148f78c77255',
  '03d06758583bb5154774a6eb221b1276c9e82d65bbaceca806d90e20c108f4b1c7',
];
const scid = (h) => {
  const n = BigInt(`0x${h}`);
  return `${n >> 40n}x${(n >> 16n) & 0xffffffn}x${n & 0xffffn}`;
};

for (let i = 0; i < Number(countArg); i++) {
  const hash = randHex(32);
  const secret = randHex(32);
  const msat = i % 4 === 0 ? null : 1 + below(2_000_000_000_000);
  const expiry = 60 + below(1_000_000);
  const cltv = 9 + below(500);
  const timestamp = 1_700_000_000 + below(100_000_000);
  const tags = [
    { tagName: 'payment_hash', data: hash },
    { tagName: 'payment_secret', data: secret },
    { tagName: 'expire_time', data: expiry },
    { tagName: 'min_final_cltv_expiry', data: cltv },
  ];
  let description = null;
  let descriptionHash = null;
  if (i % 3 === 0) {
    descriptionHash = randHex(32);
    tags.push({ tagName: 'purpose_commit_hash', data: descriptionHash });
  } else {
    description = `job ${i}: ${'ナンセンス'.slice(0, below(5))} ${randHex(below(40))}`;
    tags.push({ tagName: 'description', data: description });
  }
  const route = [];
  for (let k = 0; k < i % 3; k++) {
    const id = randHex(8);
    const hop = {
      pubkey: hops[k % hops.length],
      short_channel_id: id,
      fee_base_msat: below(100_000),
      fee_proportional_millionths: below(100_000),
      cltv_expiry_delta: below(1000),
    };
    route.push(hop);
  }
  if (route.length > 0) tags.push({ tagName: 'routing_info', data: route });
  const fields = { timestamp, tags };
  if (msat !== null) fields.millisatoshis = String(msat);
  const invoice = bolt11.sign(bolt11.encode(fields), priv).paymentRequest;
  console.log(
    JSON.stringify({
      invoice,
      amount_msat: msat,
      timestamp,
      payment_hash: hash,
      payment_secret: secret,
      description,
      description_hash: descriptionHash,
      expiry_secs: expiry,
      min_final_cltv_expiry_delta: cltv,
      route_hints: route.length === 0 ? [] : [route.map((h) => ({ ...h, short_channel_id: scid(h.short_channel_id) }))],
    }),
  );
}
