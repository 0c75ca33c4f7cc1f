/* A reference implementation of the pack container v1 (Sources/DepotCore/DepotCore.docc/
 * PackContainer.md) in C on OpenSSL, streaming, for the benchmarks' peer pipelines:
 *   pack-tool encrypt IN OUT KEYID HEXKEY   plaintext -> container (1 MiB segments), fsync
 *   pack-tool decrypt IN OUT KEYID HEXKEY   container -> plaintext, every segment checked, fsync
 *   cc -O2 -o pack-tool pack-tool.c $(pkg-config --cflags --libs libcrypto) */
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEGMENT (1u << 20)
static void die(const char *why) { fprintf(stderr, "pack-tool: %s\n", why); exit(1); }

static void data_key(const unsigned char *master, const unsigned char *salt, const char *key_id, unsigned char *out) {
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    unsigned char info[300];
    size_t info_len = strlen("assetdepot pack v1") + strlen(key_id), len = 32;
    snprintf((char *)info, sizeof info, "assetdepot pack v1%s", key_id);
    if (!ctx || EVP_PKEY_derive_init(ctx) != 1 || EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) != 1 ||
        EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, 32) != 1 || EVP_PKEY_CTX_set1_hkdf_key(ctx, master, 32) != 1 ||
        EVP_PKEY_CTX_add1_hkdf_info(ctx, info, (int)info_len) != 1 || EVP_PKEY_derive(ctx, out, &len) != 1) die("HKDF");
    EVP_PKEY_CTX_free(ctx);
}

static size_t read_full(int fd, unsigned char *buffer, size_t count) {
    size_t total = 0;
    while (total < count) {
        ssize_t n = read(fd, buffer + total, count - total);
        if (n < 0) die("read");
        if (n == 0) break;
        total += (size_t)n;
    }
    return total;
}

static void write_full(int fd, const unsigned char *buffer, size_t count) {
    while (count > 0) {
        ssize_t n = write(fd, buffer, count);
        if (n <= 0) die("write");
        buffer += n;
        count -= (size_t)n;
    }
}

static void nonce(unsigned char *out, const unsigned char *prefix, uint32_t index, int final) {
    memcpy(out, prefix, 7);
    out[7] = index >> 24; out[8] = index >> 16; out[9] = index >> 8; out[10] = index;
    out[11] = final ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 6) die("usage: pack-tool encrypt|decrypt IN OUT KEYID HEXKEY");
    int encrypt = strcmp(argv[1], "encrypt") == 0;
    const char *key_id = argv[4];
    unsigned char master[32];
    for (int i = 0; i < 32; i++) if (sscanf(argv[5] + 2 * i, "%2hhx", &master[i]) != 1) die("the key is 64 hex digits");
    int in = open(argv[2], O_RDONLY), out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0) die("open");
    size_t kid = strlen(key_id);
    unsigned char header[300], key[32], iv[12], tag[16];
    unsigned char *plain = malloc(SEGMENT + 1), *sealed = malloc(SEGMENT + 16 + 1);
    size_t header_len = 11 + kid + 32 + 7;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len;
    if (encrypt) {
        memcpy(header, "ADPK\x01\x01", 6);
        header[6] = (unsigned char)(SEGMENT >> 24); header[7] = (unsigned char)(SEGMENT >> 16);
        header[8] = (unsigned char)(SEGMENT >> 8); header[9] = (unsigned char)(SEGMENT & 0xff);
        header[10] = (unsigned char)kid;
        memcpy(header + 11, key_id, kid);
        RAND_bytes(header + 11 + kid, 32 + 7);
        write_full(out, header, header_len);
        data_key(master, header + 11 + kid, key_id, key);
        /* Read one byte ahead so that the last segment is known. */
        size_t have = read_full(in, plain, SEGMENT + 1);
        for (uint32_t index = 0;; index++) {
            int final = have <= SEGMENT;
            size_t count = final ? have : SEGMENT;
            nonce(iv, header + 11 + kid + 32, index, final);
            if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, iv) != 1 ||
                EVP_EncryptUpdate(ctx, NULL, &len, header, (int)header_len) != 1 ||
                EVP_EncryptUpdate(ctx, sealed, &len, plain, (int)count) != 1 || EVP_EncryptFinal_ex(ctx, sealed + len, &len) != 1 ||
                EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, sealed + count) != 1) die("seal");
            write_full(out, sealed, count + 16);
            if (final) break;
            plain[0] = plain[SEGMENT];
            have = 1 + read_full(in, plain + 1, SEGMENT);
        }
    } else {
        if (read_full(in, header, 11) != 11 || memcmp(header, "ADPK\x01\x01", 6) != 0) die("not a pack container v1");
        uint32_t segment = (uint32_t)header[6] << 24 | header[7] << 16 | header[8] << 8 | header[9];
        size_t id_len = header[10];
        if (segment != SEGMENT || id_len != kid) die("this tool takes 1 MiB segments and the key id given");
        header_len = 11 + id_len + 39;
        if (read_full(in, header + 11, header_len - 11) != header_len - 11 || memcmp(header + 11, key_id, kid) != 0) die("header");
        data_key(master, header + 11 + kid, key_id, key);
        size_t have = read_full(in, sealed, SEGMENT + 16 + 1);
        for (uint32_t index = 0;; index++) {
            int final = have <= SEGMENT + 16;
            size_t count = (final ? have : SEGMENT + 16) - 16;
            if (have < 16) die("truncated");
            nonce(iv, header + 11 + kid + 32, index, final);
            memcpy(tag, sealed + count, 16);
            if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, iv) != 1 ||
                EVP_DecryptUpdate(ctx, NULL, &len, header, (int)header_len) != 1 ||
                EVP_DecryptUpdate(ctx, plain, &len, sealed, (int)count) != 1 ||
                EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1 || EVP_DecryptFinal_ex(ctx, plain + len, &len) != 1) die("a segment does not authenticate");
            write_full(out, plain, count);
            if (final) break;
            sealed[0] = sealed[SEGMENT + 16];
            have = 1 + read_full(in, sealed + 1, SEGMENT + 16);
        }
    }
    if (fsync(out) != 0 || close(out) != 0) die("fsync");
    return 0;
}
