import DepotCore
@testable import DepotServer
import Foundation
import Testing

@Suite("HMAC-SHA256 and AWS Signature Version 4")
struct SigV4Tests {
    @Test("HMAC-SHA256: RFC 4231 test cases 1, 2 and 6 (a key longer than a block)")
    func hmac() {
        #expect(Hex.encode(HMACSHA256.authenticationCode(Array("Hi There".utf8), key: [UInt8](repeating: 0x0b, count: 20)))
            == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(Hex.encode(HMACSHA256.authenticationCode(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8)))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(Hex.encode(HMACSHA256.authenticationCode(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8), key: [UInt8](repeating: 0xaa, count: 131)))
            == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test("SigV4: AWS's documented GET Object example (a range of examplebucket's test.txt)")
    func awsExample() {
        let signer = SigV4(region: "us-east-1")
        let headers = signer.sign(
            method: "GET", path: "/test.txt", query: [], headers: ["Host": "examplebucket.s3.amazonaws.com", "Range": "bytes=0-9"],
            payloadSHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            credentials: AWSCredentials(accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            date: Date(timeIntervalSince1970: 1_369_353_600)
        )
        #expect(headers["x-amz-date"] == "20130524T000000Z")
        #expect(headers["Authorization"] == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test("URI encoding: unreserved characters kept, everything else as upper-case %XX, slashes in keys kept")
    func encoding() {
        #expect(SigV4.encode("a-b_c.d~e") == "a-b_c.d~e")
        #expect(SigV4.encode("a b/c+d=é") == "a%20b%2Fc%2Bd%3D%C3%A9")
        #expect(SigV4.encode("depot/blobs/ab", keepSlash: true) == "depot/blobs/ab")
    }
}
