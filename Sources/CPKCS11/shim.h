// PKCS#11 (Cryptoki) as p11-kit declares it (Debian's libp11-kit-dev; no library is linked:
// DepotPKCS11 loads the token's module with dlopen), for DepotPKCS11 only.
#include <dlfcn.h>
#include <p11-kit-1/p11-kit/pkcs11.h>
