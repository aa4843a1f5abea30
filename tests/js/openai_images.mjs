// One call of the OpenAI JavaScript SDK's images.generate against a server
// (pdit serve in the tests): writes each picture as OUT-<i>.png.
//
//   node openai_images.mjs BASE_URL OUT 'JSON of the request'
import { writeFileSync } from 'node:fs';
import OpenAI from 'openai';

const [baseURL, out, body] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.PDIT_TEST_KEY || 'unused', maxRetries: 0, timeout: 120000 });
try {
  const r = await client.images.generate(JSON.parse(body));
  r.data.forEach((d, i) => writeFileSync(`${out}-${i}.png`, Buffer.from(d.b64_json, 'base64')));
  console.log(`${r.data.length} picture(s), created ${r.created}`);
} catch (e) {
  console.error(`openai: ${e.status || ''} ${e.message}`);
  process.exit(1);
}
