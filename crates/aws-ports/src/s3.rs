//! The S3 [`ObjectStore`]: streamed multipart uploads with a bounded number of parts in
//! flight (memory ≈ `part_size × (max_in_flight + 1)` whatever the object's size), a
//! single `PutObject` for objects smaller than one part, streamed reads, head, delete.

use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use fetcher_engine::BoxFuture;
use fetcher_host::error::{Result, ServiceError};
use fetcher_host::ports::{ObjectReader, ObjectStore, ObjectWriter, validate_path};
use tokio::task::JoinSet;

/// S3's minimum size of every part but the last.
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;
/// Default part size (8 MiB).
pub const DEFAULT_PART_SIZE: usize = 8 * 1024 * 1024;
/// Default number of parts uploading at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 2;

fn unavailable<E>(e: E) -> ServiceError
where
    E: std::error::Error + Send + Sync + 'static,
{
    ServiceError::unavailable("object store unavailable").with_cause(e)
}

/// Objects under `prefix` in one bucket. Cheap to clone.
#[derive(Clone, Debug)]
pub struct S3ObjectStore {
    client: Client,
    bucket: String,
    prefix: String,
    part_size: usize,
    max_in_flight: usize,
}

impl S3ObjectStore {
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        S3ObjectStore {
            client,
            bucket: bucket.into(),
            prefix: String::new(),
            part_size: DEFAULT_PART_SIZE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
        }
    }

    /// Keys get this prefix (e.g. `results/`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Part size (at least 5 MiB) and parts in flight (at least 1).
    pub fn with_parts(mut self, part_size: usize, max_in_flight: usize) -> Self {
        self.part_size = part_size.max(MIN_PART_SIZE);
        self.max_in_flight = max_in_flight.max(1);
        self
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    fn key(&self, path: &str) -> Result<String> {
        validate_path(path)?;
        Ok(format!("{}{path}", self.prefix))
    }

    /// A liveness probe for readiness checks (HeadBucket).
    pub async fn ping(&self) -> Result<()> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

struct S3Writer {
    client: Client,
    bucket: String,
    key: String,
    part_size: usize,
    max_in_flight: usize,
    buf: Vec<u8>,
    upload_id: Option<String>,
    next_part: i32,
    in_flight: JoinSet<Result<CompletedPart>>,
    done: Vec<CompletedPart>,
    size: u64,
}

impl S3Writer {
    async fn start_upload(&mut self) -> Result<String> {
        if let Some(id) = &self.upload_id {
            return Ok(id.clone());
        }
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(&self.key)
            .content_type("application/octet-stream")
            .send()
            .await
            .map_err(unavailable)?;
        let id = out
            .upload_id
            .ok_or_else(|| ServiceError::unavailable("object store returned no upload id"))?;
        self.upload_id = Some(id.clone());
        Ok(id)
    }

    /// Sends the buffered bytes as the next part; waits while too many are in flight.
    async fn send_part(&mut self, bytes: Vec<u8>) -> Result<()> {
        let upload_id = self.start_upload().await?;
        while self.in_flight.len() >= self.max_in_flight {
            self.join_one().await?;
        }
        self.next_part += 1;
        let n = self.next_part;
        let (client, bucket, key) = (self.client.clone(), self.bucket.clone(), self.key.clone());
        self.in_flight.spawn(async move {
            let out = client
                .upload_part()
                .bucket(bucket)
                .key(key)
                .upload_id(upload_id)
                .part_number(n)
                .body(ByteStream::from(bytes))
                .send()
                .await
                .map_err(unavailable)?;
            Ok(CompletedPart::builder()
                .part_number(n)
                .set_e_tag(out.e_tag)
                .build())
        });
        Ok(())
    }

    async fn join_one(&mut self) -> Result<()> {
        if let Some(res) = self.in_flight.join_next().await {
            let part = res.map_err(|_| ServiceError::internal("part upload task failed"))??;
            self.done.push(part);
        }
        Ok(())
    }

    async fn finish_inner(&mut self) -> Result<u64> {
        if self.upload_id.is_none() {
            let body = std::mem::take(&mut self.buf);
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(&self.key)
                .content_type("application/octet-stream")
                .body(ByteStream::from(body))
                .send()
                .await
                .map_err(unavailable)?;
            return Ok(self.size);
        }
        if !self.buf.is_empty() {
            let last = std::mem::take(&mut self.buf);
            self.send_part(last).await?;
        }
        while !self.in_flight.is_empty() {
            self.join_one().await?;
        }
        self.done.sort_by_key(|p| p.part_number());
        self.client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(&self.key)
            .upload_id(self.upload_id.clone().unwrap_or_default())
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(std::mem::take(&mut self.done)))
                    .build(),
            )
            .send()
            .await
            .map_err(unavailable)?;
        Ok(self.size)
    }

    async fn abort_inner(&mut self) {
        self.in_flight.abort_all();
        while self.in_flight.join_next().await.is_some() {}
        if let Some(id) = self.upload_id.take()
            && let Err(e) = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(&self.key)
                .upload_id(id)
                .send()
                .await
        {
            tracing::warn!(error = %e, "aborting a multipart upload failed (the bucket lifecycle rule cleans it up)");
        }
    }
}

impl ObjectWriter for S3Writer {
    fn write<'a>(&'a mut self, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut rest = bytes;
            while !rest.is_empty() {
                let take = (self.part_size - self.buf.len()).min(rest.len());
                self.buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                self.size += take as u64;
                if self.buf.len() >= self.part_size {
                    let part = std::mem::replace(&mut self.buf, Vec::with_capacity(self.part_size));
                    if let Err(e) = self.send_part(part).await {
                        self.abort_inner().await;
                        return Err(e);
                    }
                }
            }
            Ok(())
        })
    }

    fn finish(mut self: Box<Self>) -> BoxFuture<'static, Result<u64>> {
        Box::pin(async move {
            match self.finish_inner().await {
                Ok(n) => Ok(n),
                Err(e) => {
                    self.abort_inner().await;
                    Err(e)
                }
            }
        })
    }

    fn abort(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.abort_inner().await })
    }
}

struct S3Reader {
    body: ByteStream,
}

impl ObjectReader for S3Reader {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            loop {
                match self.body.try_next().await {
                    Ok(Some(b)) if b.is_empty() => continue,
                    Ok(Some(b)) => return Ok(Some(b.to_vec())),
                    Ok(None) => return Ok(None),
                    Err(e) => return Err(unavailable(e)),
                }
            }
        })
    }
}

impl ObjectStore for S3ObjectStore {
    fn put<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Box<dyn ObjectWriter>>> {
        Box::pin(async move {
            let key = self.key(path)?;
            Ok(Box::new(S3Writer {
                client: self.client.clone(),
                bucket: self.bucket.clone(),
                key,
                part_size: self.part_size,
                max_in_flight: self.max_in_flight,
                buf: Vec::new(),
                upload_id: None,
                next_part: 0,
                in_flight: JoinSet::new(),
                done: Vec::new(),
                size: 0,
            }) as Box<dyn ObjectWriter>)
        })
    }

    fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Box<dyn ObjectReader>>>> {
        Box::pin(async move {
            let key = self.key(path)?;
            match self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
            {
                Ok(out) => Ok(Some(
                    Box::new(S3Reader { body: out.body }) as Box<dyn ObjectReader>
                )),
                Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => Ok(None),
                Err(e) => Err(unavailable(e)),
            }
        })
    }

    fn delete<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let key = self.key(path)?;
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn head<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(async move {
            let key = self.key(path)?;
            match self
                .client
                .head_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
            {
                Ok(out) => Ok(Some(out.content_length.unwrap_or(0).max(0) as u64)),
                Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
                Err(e) => Err(unavailable(e)),
            }
        })
    }
}

/// An `Arc` for wiring.
pub fn shared(store: S3ObjectStore) -> Arc<dyn ObjectStore> {
    Arc::new(store)
}
