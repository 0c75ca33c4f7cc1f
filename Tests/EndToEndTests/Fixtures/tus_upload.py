#!/usr/bin/env python3
"""Uploads a file to AssetDepot with tuspy, the reference Python tus 1.0 client.

The end-to-end tests use it to show that a standard tus client works, not only ours.
Prints the upload URL and the offset reached.
"""
import argparse

from tusclient import client

parser = argparse.ArgumentParser()
parser.add_argument("endpoint", help="http://HOST:PORT/v1/apps/APP/uploads")
parser.add_argument("file")
parser.add_argument("--token", required=True)
parser.add_argument("--pack", required=True)
parser.add_argument("--url", help="resume this upload instead of creating one")
parser.add_argument("--chunk-size", type=int, default=1 << 20)
parser.add_argument("--chunks", type=int, help="stop after this many chunks")
parser.add_argument("--meta", action="append", default=[], help="KEY=VALUE metadata")
args = parser.parse_args()

tus = client.TusClient(args.endpoint, headers={"Authorization": "Bearer " + args.token})
metadata = {"pack": args.pack}
metadata.update(item.split("=", 1) for item in args.meta)
uploader = tus.uploader(
    args.file, url=args.url, chunk_size=args.chunk_size, metadata=metadata,
    upload_checksum=True, retries=5, retry_delay=0.2,
)
if args.chunks is None:
    uploader.upload()
else:
    for _ in range(args.chunks):
        uploader.upload_chunk()
print(uploader.url)
print(uploader.offset)
