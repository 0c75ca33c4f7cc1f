/// The bytes of the worked example in `PackContainer.md`, computed independently by
/// `Fixtures/independent_pack.py example` (Python `cryptography`); the test, the article and
/// that script must agree.
enum WorkedExample {
    static let dataKey = "9162ed6c5f6e6ea829bbc8413bf1c0a71bc58f08f79c0aa18c25c326b98b7e83"
    static let container = "4144504b010100000010026b31000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        + "a0a1a2a3a4a5a6"
        + "ebeb856c86b07f860f34e2e05b0b092d045ca73b3a0c080e1a3d3bc9a5daaf8ffb7d1cb19e64b2c1c156581cd4c4926c"
        + "5cf9422ae05b98357a9c"
}
