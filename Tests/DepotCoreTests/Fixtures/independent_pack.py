#!/usr/bin/env python3
"""An independent pack container v1 encryptor/decryptor written from PackContainer.md alone,
using the `cryptography` package. Prints the worked example, or decrypts a pack:
    independent_pack.py example
    independent_pack.py decrypt PACK KEYID HEXKEY > plaintext
"""
import struct, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives import hashes

def data_key(master, salt, key_id):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt,
                info=b"assetdepot pack v1" + key_id.encode()).derive(master)

def header(seg, key_id, salt, prefix):
    kid = key_id.encode()
    return b"ADPK" + bytes([1, 1]) + struct.pack(">I", seg) + bytes([len(kid)]) + kid + salt + prefix

def encrypt(plain, seg, key_id, master, salt, prefix):
    h = header(seg, key_id, salt, prefix)
    aead = AESGCM(data_key(master, salt, key_id))
    chunks = [plain[i:i + seg] for i in range(0, len(plain), seg)] or [b""]
    out = h
    for i, c in enumerate(chunks):
        nonce = prefix + struct.pack(">I", i) + bytes([1 if i == len(chunks) - 1 else 0])
        out += aead.encrypt(nonce, c, h)
    return out

def decrypt(data, keys):
    assert data[:4] == b"ADPK" and data[4] == 1 and data[5] == 1
    seg = struct.unpack(">I", data[6:10])[0]
    n = data[10]
    kid = data[11:11 + n].decode()
    salt = data[11 + n:43 + n]
    prefix = data[43 + n:50 + n]
    h = data[:50 + n]
    aead = AESGCM(data_key(keys[kid], salt, kid))
    body = data[len(h):]
    records = [body[i:i + seg + 16] for i in range(0, len(body), seg + 16)]
    out = b""
    for i, r in enumerate(records):
        nonce = prefix + struct.pack(">I", i) + bytes([1 if i == len(records) - 1 else 0])
        out += aead.decrypt(nonce, r, h)
    return out

if __name__ == "__main__":
    if sys.argv[1] == "example":
        master = bytes(range(0x80, 0xa0))
        salt = bytes(range(32))
        prefix = bytes([0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6])
        print("dataKey", data_key(master, salt, "k1").hex())
        print("container", encrypt(b"AssetDepot pack v1 example", 16, "k1", master, salt, prefix).hex())
    elif sys.argv[1] == "decrypt":
        data = open(sys.argv[2], "rb").read()
        sys.stdout.buffer.write(decrypt(data, {sys.argv[3]: bytes.fromhex(sys.argv[4])}))
