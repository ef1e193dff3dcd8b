import { connect, type TLSSocket } from 'node:tls';
import { WarrenError } from '@warren/api';

/**
 * A TLS connection to an edge whose certificate is the one pinned (its SHA-256 fingerprint, as
 * Node prints it): resolves once the handshake is done and the fingerprint matches, before
 * anything is sent, so the token never goes to another peer. No CA is asked: an edge's
 * certificate is self-signed, made at its start, and handed over in its join.
 */
export function connectPinned(host: string, port: number, fingerprint: string): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port, rejectUnauthorized: false });
    const fail = (e: Error): void => reject(new WarrenError('unavailable', `the edge cannot be reached: ${e.message}`, {}, { cause: e }));
    s.once('error', fail);
    s.once('secureConnect', () => {
      s.removeListener('error', fail);
      s.on('error', () => undefined);
      if (s.getPeerCertificate().fingerprint256 !== fingerprint) {
        s.destroy();
        reject(new WarrenError('unavailable', 'the edge presented a certificate other than the one it joined with'));
        return;
      }
      resolve(s);
    });
  });
}
