// The page pdit serve shows at / in headless Chromium, as a user would use
// it: type a prompt, set the size and seed, press Generate, wait for the
// picture, take a screenshot. Prints one JSON line: the picture's src and
// the parameters shown. With FRAMES: a video, played; the line has the
// video's size, duration and state as the browser decoded it. With
// --image=FILE: the picture uploaded (the size taken from it, WIDTH and
// HEIGHT not typed), a mask painted over it with the mouse (two strokes),
// --strength=S typed; the line has what the page sent (image, mask,
// strength, size).
//
//   node page_test.mjs CHROMIUM URL SCREENSHOT.png WIDTH HEIGHT [FRAMES] [--image=FILE --strength=S]
import puppeteer from 'puppeteer-core';

const args = process.argv.slice(2);
const opt = Object.fromEntries(args.filter(a => a.startsWith('--')).map(a => a.slice(2).split(/=(.*)/s).slice(0, 2)));
const [exe, url, shot, width, height, frames] = args.filter(a => !a.startsWith('--'));
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
  let sent = null;
  page.on('request', r => { if (r.method() === 'POST' && r.url().endsWith('/v1/jobs')) sent = JSON.parse(r.postData()); });
  await set('#prompt', 'a lighthouse at dusk');
  if (opt.image) {
    await (await page.$('#image')).uploadFile(opt.image);
    await page.waitForFunction(() => !document.getElementById('paint').hidden &&
      document.getElementById('maskcanvas').width > 0 && document.getElementById('width').value !== '512');
    // two strokes across the picture, in page coordinates
    const box = await (await page.$('#maskcanvas')).boundingBox();
    for (const [y0, y1] of [[0.2, 0.3], [0.6, 0.9]]) {
      await page.mouse.move(box.x + box.width * 0.1, box.y + box.height * y0);
      await page.mouse.down();
      await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * y1, { steps: 8 });
      await page.mouse.up();
    }
    if (opt.strength) await set('#strength', opt.strength);
  } else {
    await set('#width', width);
    await set('#height', height);
  }
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
  if (sent) got.sent = { image: sent.image, mask: sent.mask, strength: sent.strength, size: sent.size };
  await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify(got));
} finally {
  await browser.close();
}
