// Token balances read the way a wallet built on viem reads them, through the
// URL given: `readContract` of `balanceOf` for every (token, holder), and
// one `multicall` (Multicall3 aggregate3) of all of them, at one block.
//
// Usage: node viem-balances.cjs RPC_URL '{"block":N,"tokens":[..],"holders":[..]}'
// Prints {"read":[[token,holder,"wei"],..],"multicall":["wei",..]}, the
// multicall's results in the order tokens x holders. The test that runs it
// sets VIEM to the installed viem package.
const { createPublicClient, http, parseAbi } = require(process.env.VIEM || "viem");

async function main() {
  const [url, spec] = process.argv.slice(2);
  const { block, tokens, holders } = JSON.parse(spec);
  const client = createPublicClient({ transport: http(url, { batch: false, retryCount: 0 }) });
  const abi = parseAbi(["function balanceOf(address holder) view returns (uint256)"]);
  const blockNumber = BigInt(block);
  const pairs = tokens.flatMap((token) => holders.map((holder) => [token, holder]));
  const read = [];
  for (const [token, holder] of pairs) {
    const wei = await client.readContract({ address: token, abi, functionName: "balanceOf", args: [holder], blockNumber });
    read.push([token, holder, wei.toString()]);
  }
  const results = await client.multicall({
    contracts: pairs.map(([token, holder]) => ({ address: token, abi, functionName: "balanceOf", args: [holder] })),
    multicallAddress: "0xcA11bde05977b3631167028862bE2a173976CA11",
    blockNumber,
    allowFailure: false,
    // One aggregate3 for all of them (viem chunks at 1 KiB by default).
    batchSize: 0,
  });
  console.log(JSON.stringify({ read, multicall: results.map((wei) => wei.toString()) }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
