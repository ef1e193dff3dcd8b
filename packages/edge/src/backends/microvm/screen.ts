import { promisify } from 'node:util';
import { crc32, deflate } from 'node:zlib';
import { WarrenError } from '@warren/api';

/** A picture as rows of RGB bytes, top row first. */
export interface RgbImage {
  width: number;
  height: number;
  /** width × height × 3 bytes. */
  rgb: Buffer;
}

/**
 * The largest screen a PPM here may describe (pixels): what QEMU's VGA (16 MiB of video memory)
 * shows at its fewest bits a pixel (4), a bound on what a VM's dump can make the node allocate.
 */
const MAX_PIXELS = 2 ** 25;
/** The longest side (pixels): the VGA's own (its VBE registers take 16,000 x 12,000 at most); rows are handled one by one. */
const MAX_SIDE = 16_384;
/** The largest PPM file of such a screen (its header is short): what a node reads of a dump at most. */
export const MAX_PPM_BYTES = 3 * MAX_PIXELS + 64;

/**
 * A binary PPM (P6, 8 bits a sample: what QEMU's `screendump` writes) as an RgbImage (pure).
 * Anything else, or a size its bytes do not hold, is refused.
 */
export function parsePpm(buf: Buffer): RgbImage {
  // Header: "P6", width, height, maxval, each after whitespace (comments are not written by QEMU), then one whitespace byte.
  const fields: string[] = [];
  let i = 0;
  while (fields.length < 4 && i < Math.min(buf.length, 64)) {
    while (i < buf.length && /\s/.test(String.fromCharCode(buf[i]!))) i++;
    const start = i;
    while (i < buf.length && !/\s/.test(String.fromCharCode(buf[i]!))) i++;
    fields.push(buf.toString('latin1', start, i));
  }
  const [magic, w, h, max] = fields;
  const width = Number(w);
  const height = Number(h);
  if (
    magic !== 'P6' ||
    max !== '255' ||
    !Number.isInteger(width) ||
    !Number.isInteger(height) ||
    width < 1 ||
    height < 1 ||
    width > MAX_SIDE ||
    height > MAX_SIDE ||
    width * height > MAX_PIXELS
  )
    throw new WarrenError('internal', `not a screen dump this node reads (${magic ?? 'empty'} ${w ?? ''}x${h ?? ''} max ${max ?? ''})`);
  const rgb = buf.subarray(i + 1, i + 1 + width * height * 3);
  if (rgb.length !== width * height * 3) throw new WarrenError('internal', `a ${width}x${height} screen dump holds ${rgb.length} bytes of pixels`);
  return { width, height, rgb };
}

/** A PNG chunk: length, type, data, CRC over type and data. */
function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))) >>> 0, 0);
  return Buffer.concat([head, data, crc]);
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

const deflateAsync = promisify(deflate);

/**
 * An RgbImage as a PNG: 8-bit truecolour, no interlace, rows unfiltered. The event loop does one
 * copy a row (no work a pixel: a screen's rows repeat each other, which deflate finds as well as
 * it would their differences) and zlib's deflate runs on libuv's threads, so a large screen
 * stalls no other request while it is encoded.
 */
export async function encodePng(img: RgbImage): Promise<Buffer> {
  const stride = img.width * 3;
  // Each row after its filter byte (0: none, Buffer.alloc's zero).
  const raw = Buffer.alloc((stride + 1) * img.height);
  for (let y = 0; y < img.height; y++) img.rgb.copy(raw, (stride + 1) * y + 1, y * stride, (y + 1) * stride);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(img.width, 0);
  ihdr.writeUInt32BE(img.height, 4);
  ihdr[8] = 8; // bits per sample
  ihdr[9] = 2; // truecolour
  return Buffer.concat([PNG_SIGNATURE, chunk('IHDR', ihdr), chunk('IDAT', await deflateAsync(raw, { level: 6 })), chunk('IEND', Buffer.alloc(0))]);
}
