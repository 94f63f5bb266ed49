// The calls a wallet or a dapp built on viem makes that run code which is
// not deployed, or over state overrides, through the URL given, at one
// block: sign-in checks (verifyMessage: ERC-6492's validator created in an
// eth_call) of an EOA, of a contract wallet (ERC-1271) and of a wrong
// signer; a multicall on a chain whose definition names no Multicall3
// (Multicall3 created in the call); readContract with `code`; calls and an
// estimate over state overrides (a balance, a storage word, code) and
// block overrides; and a preview (simulateCalls with traceAssetChanges).
//
// Usage: node viem-wallet-calls.cjs RPC_URL SPEC_JSON
// SPEC: {"block":N,"chainId":N,"wallet":"0x..","ownerKey":"0x..",
//        "otherKey":"0x..","token":"0x..","holder":"0x..",
//        "walletCode":"0x..","balanceSlot":"0x.."}
// Prints one JSON object, each call's answer by name (an error as
// {"error": its short message}); the test compares the proxy's with the
// node's. The test that runs it sets VIEM to the installed viem package.
const viemPath = process.env.VIEM || "viem";
const { createPublicClient, http, parseAbi, defineChain } = require(viemPath);
const { privateKeyToAccount } = require(viemPath + "/accounts");

const erc20 = parseAbi([
  "function balanceOf(address holder) view returns (uint256)",
  "function totalSupply() view returns (uint256)",
  "function transfer(address to, uint256 amount) returns (bool)",
]);

// What a call gave, as JSON: a bigint as a decimal string, an error as its
// short message.
async function settle(promise) {
  try {
    const value = await promise;
    return JSON.parse(JSON.stringify({ value }, (_, v) => (typeof v === "bigint" ? v.toString() : v))).value ?? null;
  } catch (e) {
    return { error: e.shortMessage || e.message };
  }
}

async function main() {
  const [url, specText] = process.argv.slice(2);
  const spec = JSON.parse(specText);
  // A chain that names no Multicall3 and no ERC-6492 verifier: viem
  // creates both in the call.
  const chain = defineChain({
    id: spec.chainId,
    name: "test",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [url] } },
  });
  const client = createPublicClient({ chain, transport: http(url, { batch: false, retryCount: 0 }) });
  const blockNumber = BigInt(spec.block);
  const owner = privateKeyToAccount(spec.ownerKey);
  const other = privateKeyToAccount(spec.otherKey);
  const message = "Sign in to example.org";
  const signed = await owner.signMessage({ message });
  const wrong = await other.signMessage({ message });
  const out = {};
  out.verifyEoa = await settle(client.verifyMessage({ address: owner.address, message, signature: signed, blockNumber }));
  out.verifyWallet = await settle(client.verifyMessage({ address: spec.wallet, message, signature: signed, blockNumber }));
  out.verifyWalletWrongSigner = await settle(
    client.verifyMessage({ address: spec.wallet, message, signature: wrong, blockNumber }),
  );
  out.multicall = await settle(
    client.multicall({
      contracts: [
        { address: spec.token, abi: erc20, functionName: "balanceOf", args: [spec.holder] },
        { address: spec.token, abi: erc20, functionName: "totalSupply" },
      ],
      blockNumber,
      deployless: true,
    }),
  );
  // A wallet's creation code (with its owner) run where none is
  // deployed: its threshold, read back.
  out.readWithCode = await settle(
    client.readContract({
      code: spec.walletCode,
      abi: parseAbi(["function threshold() view returns (uint256)"]),
      functionName: "threshold",
      blockNumber,
    }),
  );
  const rich = 10n ** 24n;
  const balanceOf = { abi: erc20, functionName: "balanceOf", args: [spec.holder] };
  out.callBalanceOverride = await settle(
    client.call({
      account: spec.holder,
      to: owner.address,
      value: rich,
      blockNumber,
      stateOverride: [{ address: spec.holder, balance: rich * 2n }],
    }),
  );
  const { encodeFunctionData } = require(viemPath);
  out.callStateDiff = await settle(
    client.call({
      to: spec.token,
      data: encodeFunctionData(balanceOf),
      blockNumber,
      stateOverride: [
        {
          address: spec.token,
          stateDiff: [{ slot: spec.balanceSlot, value: "0x00000000000000000000000000000000000000000000000000000000000004d2" }],
        },
      ],
    }),
  );
  // Code that returns the block's time and number (TIMESTAMP PUSH0 MSTORE
  // NUMBER PUSH1 32 MSTORE PUSH1 64 PUSH0 RETURN), created in a call whose
  // block overrides name both.
  out.callBlockOverride = await settle(
    client.call({
      data: "0x425f524360205260405ff3",
      blockNumber,
      blockOverrides: { time: 2000000000n, number: 123456n, baseFeePerGas: 7n },
    }),
  );
  const transfer = encodeFunctionData({ abi: erc20, functionName: "transfer", args: [owner.address, 1000n] });
  out.estimateWithOverride = await settle(
    client.estimateGas({
      account: spec.holder,
      to: spec.token,
      data: transfer,
      blockNumber,
      stateOverride: [
        {
          address: spec.token,
          stateDiff: [{ slot: spec.balanceSlot, value: "0x00000000000000000000000000000000000000000000000000000000000f4240" }],
        },
      ],
    }),
  );
  // A wallet's preview of a payment of 1,000 of the token to another
  // address (anvil does not run this one: the test checks it against the
  // balances it reads).
  const payOut = encodeFunctionData({
    abi: erc20,
    functionName: "transfer",
    args: ["0x7777777777777777777777777777777777777777", 1000n],
  });
  const preview = await settle(
    client.simulateCalls({
      account: spec.holder,
      blockNumber,
      calls: [{ to: spec.token, data: payOut }],
      traceAssetChanges: true,
    }),
  );
  // The simulated block's roots and hash are not made here (docs): its
  // calls and the asset changes are compared.
  out.preview = preview && preview.error ? preview : { results: preview.results, assetChanges: preview.assetChanges };
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
