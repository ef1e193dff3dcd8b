// A self-signed certificate for `localhost` (ECDSA P-256, valid to 2036) and its key, for the SDK's
// TLS tests only: made once by the edge's selfSignedCertificate and kept here, so that the SDK's
// tests need no other package. It protects nothing.
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
