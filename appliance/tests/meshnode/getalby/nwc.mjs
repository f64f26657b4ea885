// @getalby/sdk's NWC client against the node's wallet service, driven by the NWC interop
// test (appliance/tests/meshnode/nwc.rs):
//   node nwc.mjs NPM_DIR URI INVOICE_TO_PAY  -> one JSON line: info, balance, an invoice made
//                                               and looked up, one paid, the transactions,
//                                               the notifications received meanwhile
//   node nwc.mjs NPM_DIR URI                 -> the wallet's error for get_balance, as JSON
import { createRequire } from 'node:module';

const [, , npmDir, uri, invoice] = process.argv;
const require = createRequire(`${npmDir}/package.json`);
globalThis.WebSocket ??= require('ws');
const { NWCClient } = require('@getalby/sdk/nwc');

const client = new NWCClient({ nostrWalletConnectUrl: uri });
try {
  if (!invoice) {
    try {
      await client.getBalance();
      console.log(JSON.stringify({ refused: null }));
    } catch (e) {
      console.log(JSON.stringify({ refused: { code: e.code, message: e.message } }));
    }
  } else {
    const notes = [];
    const unsubscribe = await client.subscribeNotifications(
      (n) => notes.push(n),
      ['payment_received', 'payment_sent'],
    );
    const info = await client.getInfo();
    const balance = await client.getBalance();
    const made = await client.makeInvoice({ amount: 3000, description: 'from alby' });
    const paid = await client.payInvoice({ invoice });
    const balanceAfter = await client.getBalance();
    const looked = await client.lookupInvoice({ payment_hash: made.payment_hash });
    const listed = await client.listTransactions({ unpaid: true });
    // the payment it sent, and the invoice it made once the mint has it paid and the node
    // has claimed it (looked for every 5 s)
    const both = () => ['payment_sent', 'payment_received']
      .every((t) => notes.some((n) => n.notification_type === t));
    for (let i = 0; i < 150 && !both(); i++) await new Promise((r) => setTimeout(r, 200));
    unsubscribe();
    console.log(JSON.stringify({ info, balance, made, paid, balanceAfter, looked, listed, notes }));
  }
} finally {
  client.close();
}
