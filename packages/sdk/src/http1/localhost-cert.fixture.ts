// Two self-signed certificates for `localhost` (ECDSA P-256, valid to 2036) and their keys, for the
// SDK's TLS tests only: the first made once by the edge's selfSignedCertificate, the second by
// openssl (a subject of its own: two CAs of one name are one issuer to OpenSSL's lookup), kept
// here so that the SDK's tests need no other package. They protect nothing.
export const LOCALHOST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgMuny1Mh/8AfuYcVs
XB+QDKYkx/DVpxpXOkafu65+HwihRANCAATYPifDARQAMQ8Gq1LtwlaE+q6As9n0
F9Vk0i6opwRatwTkMEWhC+tKckY/UciE4vP0hThug/yPaR/HeQZsdtqV
-----END PRIVATE KEY-----
`;

export const LOCALHOST_CERT = `-----BEGIN CERTIFICATE-----
MIIBJDCByqADAgECAhBM4YdqjD/Qo/l3h/Uz+pKmMAoGCCqGSM49BAMCMBQxEjAQ
BgNVBAMMCWxvY2FsaG9zdDAeFw0yNjEyMDYxOTEyNDhaFw0zNjEyMDQxOTEyNDha
MBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IA
BNg+J8MBFAAxDwarUu3CVoT6roCz2fQX1WTSLqinBFq3BOQwRaEL60pyRj9RyITi
8/SFOG6D/I9pH8d5Bmx22pUwCgYIKoZIzj0EAwIDSQAwRgIhAMwSutfgmgkKEAK5
5bSqbYu43CI80f0VdfTLKB4Uq1x2AiEAnsUQiN92DMVPWnVWusZDwtbB6Pf9lf/g
yH7Cny/NGcc=
-----END CERTIFICATE-----
`;

/** Another (its own subject, `localhost` as its DNS name), for a server the first does not vouch for. */
export const OTHER_LOCALHOST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgJi5m7xgMQtbiDHXI
dMpnYGGkjmyyAmF1SVKsrIrYPdqhRANCAASbawGfllSv12LWFhuRIfDOJ+WgYLgk
JUKu/sgzu7/aeI/EmbBwsZcFL/lfA//5OIL/bA/I4IvuSaCeFU7fuI6f
-----END PRIVATE KEY-----
`;

export const OTHER_LOCALHOST_CERT = `-----BEGIN CERTIFICATE-----
MIIBrDCCAVOgAwIBAgIULP6npYphNsCTXs8t6OB03uhqTVgwCgYIKoZIzj0EAwIw
ITEfMB0GA1UEAwwWV2FycmVuIFNESyB0ZXN0LCBvdGhlcjAeFw0yNjEyMDcxOTMw
NTFaFw0zNjEyMDQxOTMwNTFaMCExHzAdBgNVBAMMFldhcnJlbiBTREsgdGVzdCwg
b3RoZXIwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASbawGfllSv12LWFhuRIfDO
J+WgYLgkJUKu/sgzu7/aeI/EmbBwsZcFL/lfA//5OIL/bA/I4IvuSaCeFU7fuI6f
o2kwZzAdBgNVHQ4EFgQUXqd6KgZ/dN+V2OdslkYaeiH6xzYwHwYDVR0jBBgwFoAU
Xqd6KgZ/dN+V2OdslkYaeiH6xzYwDwYDVR0TAQH/BAUwAwEB/zAUBgNVHREEDTAL
gglsb2NhbGhvc3QwCgYIKoZIzj0EAwIDRwAwRAIgcvjBnWrRH6OFOrxOijE6B8kH
zNrKmu8k+LDTKrOb474CIGa1zcCcQXO7aVWPZHDvFw9i+EMUnz9cFgyI8+Y/wHVp
-----END CERTIFICATE-----
`;
