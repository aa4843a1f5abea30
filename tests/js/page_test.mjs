// The page pdit serve shows at / in headless Chromium, as a user would use
// it: type a prompt, set the size and seed, press Generate, wait for the
// picture, take a screenshot. Prints one JSON line: the picture's src and
// the parameters shown.
//
//   node page_test.mjs CHROMIUM URL SCREENSHOT.png WIDTH HEIGHT
import puppeteer from 'puppeteer-core';

const [exe, url, shot, width, height] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: exe,
  headless: true,
  // root in a container: no sandbox; no GPU on these machines
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(120000);
  await page.goto(url, { waitUntil: 'load' });
  const set = async (sel, v) => { await page.$eval(sel, e => { e.value = ''; }); await page.type(sel, v); };
  await set('#prompt', 'a lighthouse at dusk');
  await set('#width', width);
  await set('#height', height);
  await set('#steps', '2');
  await set('#seed', '5');
  await page.click('#go');
  await page.waitForFunction(() => {
    const img = document.getElementById('picture');
    return (img.style.display === 'block' && img.complete && img.naturalWidth > 0) ||
      document.getElementById('error').textContent !== '';
  });
  const got = await page.evaluate(() => ({
    src: document.getElementById('picture').src,
    parameters: document.getElementById('parameters').textContent,
    error: document.getElementById('error').textContent,
    status: document.getElementById('status').textContent,
    natural: [document.getElementById('picture').naturalWidth, document.getElementById('picture').naturalHeight],
  }));
  await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify(got));
} finally {
  await browser.close();
}
