// @getalby/sdk's NWC client against the node's wallet service, driven by the NWC interop
// test (appliance/tests/meshnode/nwc.rs):
//   node nwc.mjs NPM_DIR URI INVOICE_TO_PAY  -> one JSON line: info, balance, an invoice made
//                                               and looked up, one paid, the transactions
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
    const info = await client.getInfo();
    const balance = await client.getBalance();
    const made = await client.makeInvoice({ amount: 3000, description: 'from alby' });
    const paid = await client.payInvoice({ invoice });
    const balanceAfter = await client.getBalance();
    const looked = await client.lookupInvoice({ payment_hash: made.payment_hash });
    const listed = await client.listTransactions({ unpaid: true });
    console.log(JSON.stringify({ info, balance, made, paid, balanceAfter, looked, listed }));
  }
} finally {
  client.close();
}
