// An S3-compatible server for tests/backup_s3_test.sh, in its own process:
// s3rver (the S3 REST API, objects kept in a directory) with AWS Signature
// Version 4 checked in front of it. s3rver 3.7 accepts any well-formed V4
// signature, so each request's signature is computed again here by aws4 (an
// implementation independent of Fusee's) over the headers the request says
// it signed, with the secret this server knows, and a mismatch is refused as
// S3 refuses it (403 SignatureDoesNotMatch).
//
//   node server.mjs DIR BUCKET SECRET     prints "listening PORT" when ready
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const S3rver = require('s3rver');
const aws4 = require('aws4');

const [directory, bucket, secret] = process.argv.slice(2);
if (!directory || !bucket || !secret) {
  console.error('usage: node server.mjs DIR BUCKET SECRET');
  process.exit(2);
}
const accessKeyId = 'S3RVER';  // the only key s3rver's accounts know

function refuse(ctx, status, code, message) {
  ctx.status = status;
  ctx.type = 'application/xml';
  ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message></Error>`;
}

const authorization =
  /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/;

async function verify(ctx, next) {
  const parts = authorization.exec(ctx.get('authorization'));
  if (!parts) return refuse(ctx, 403, 'AccessDenied', 'no AWS4-HMAC-SHA256 Authorization header');
  const [, key, , region, signedHeaders, signature] = parts;
  if (key !== accessKeyId) return refuse(ctx, 403, 'InvalidAccessKeyId', `unknown access key ${key}`);
  const names = signedHeaders.split(';');
  for (const needed of ['host', 'x-amz-date', 'x-amz-content-sha256']) {
    if (!names.includes(needed)) return refuse(ctx, 403, 'AccessDenied', `${needed} is not signed`);
  }
  const headers = {};
  for (const name of names) headers[name] = ctx.get(name);
  const request = { host: headers.host, method: ctx.method, path: ctx.url, service: 's3', region, headers };
  aws4.sign(request, { accessKeyId, secretAccessKey: secret });
  const expected = /Signature=([0-9a-f]{64})/.exec(request.headers.Authorization)[1];
  if (expected !== signature) {
    return refuse(ctx, 403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match');
  }
  await next();
}

// S3 stores an object whole or not at all: a PUT whose client dies mid-body
// stores nothing, and a GET never sees half an object. s3rver 3.7 writes the
// body straight into the object's file as it arrives, which shows a torn
// object to a reader, and leaves one when the client dies mid-PUT (as the
// kill demo's worker does). So its store gathers the body first and renames
// a finished file into place.
const FilesystemStore = require('s3rver/lib/stores/filesystem');
const { createHash } = require('node:crypto');
const fs = require('node:fs/promises');
const nodePath = require('node:path');
let temporaries = 0;
FilesystemStore.prototype.putObject = async function putObjectWhole(object) {
  let content = object.content;
  if (!Buffer.isBuffer(content)) {
    const chunks = [];
    for await (const chunk of content) chunks.push(chunk);  // throws when the client goes away mid-body
    content = Buffer.concat(chunks);
  }
  const declared = Number(object.metadata['content-length']);
  if (Number.isFinite(declared) && content.length !== declared) {
    throw new Error(`a body of ${content.length} bytes, not the ${declared} declared: not stored`);
  }
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  await fs.mkdir(nodePath.dirname(objectPath), { recursive: true });
  const temporary = `${objectPath}.tmp-${process.pid}-${temporaries++}`;
  await fs.writeFile(temporary, content);
  await fs.rename(temporary, objectPath);
  const md5 = createHash('md5').update(content).digest('hex');
  await this.putMetadata(object.bucket, object.key, object.metadata, md5);
  return { size: content.length, md5 };
};

const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  directory,
  silent: true,
  configureBuckets: [{ name: bucket }],
});
server.middleware.unshift(verify);  // before s3rver's own
const { port } = await server.run();
console.log(`listening ${port}`);
