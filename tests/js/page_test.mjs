// The page pdit serve shows at / in headless Chromium, as a user would use
// it: type a prompt, set the size and seed, press Generate, wait for the
// picture, take a screenshot. Prints one JSON line: the picture's src and
// the parameters shown. With FRAMES: a video, played; the line has the
// video's size, duration and state as the browser decoded it.
//
//   node page_test.mjs CHROMIUM URL SCREENSHOT.png WIDTH HEIGHT [FRAMES]
import puppeteer from 'puppeteer-core';

const [exe, url, shot, width, height, frames] = process.argv.slice(2);
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
  if (frames) await set('#frames', frames);
  await page.click('#go');
  await page.waitForFunction(() => {
    const img = document.getElementById('picture'), v = document.getElementById('video');
    return (img.style.display === 'block' && img.complete && img.naturalWidth > 0) ||
      (v.style.display === 'block' && (v.readyState >= 2 || v.error)) ||
      document.getElementById('error').textContent !== '';
  });
  const got = await page.evaluate(() => ({
    video: (v => ({ shown: v.style.display === 'block', width: v.videoWidth, height: v.videoHeight,
                    duration: v.duration, readyState: v.readyState, error: v.error ? v.error.message || String(v.error.code) : null,
                    type: v.src.slice(0, 5) }))(document.getElementById('video')),
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
