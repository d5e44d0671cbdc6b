//! SQS: the [`JobQueue`] publisher and the way back from a Lambda SQS record.
//!
//! The signed envelope travels as it does on RabbitMQ: its headers become SQS message
//! attributes (type `String`; empty values are left out, and a missing header reads as
//! empty, which is what the verifier assumes), the body is the message body verbatim.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageAttributeValue;
use fetcher_engine::BoxFuture;
use fetcher_host::error::{Result, ServiceError};
use fetcher_host::model::QueueMessage;
use fetcher_host::ports::JobQueue;

/// Sends job messages to one queue.
#[derive(Clone, Debug)]
pub struct SqsJobQueue {
    client: Client,
    queue_url: String,
}

impl SqsJobQueue {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        SqsJobQueue {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// Brings a received message back after `delay` instead of the queue's visibility
    /// timeout (a retried job backs off in minutes, not the hours a long timeout means).
    pub async fn delay_redelivery(
        &self,
        receipt_handle: &str,
        delay: std::time::Duration,
    ) -> Result<()> {
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(delay.as_secs().min(43_200) as i32)
            .send()
            .await
            .map_err(|e| ServiceError::unavailable("job queue unavailable").with_cause(e))?;
        Ok(())
    }

    /// A liveness probe for readiness checks (GetQueueAttributes).
    pub async fn ping(&self) -> Result<()> {
        self.client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .send()
            .await
            .map_err(|e| ServiceError::unavailable("job queue unavailable").with_cause(e))?;
        Ok(())
    }
}

impl SqsJobQueue {
    /// Sends `message` (its headers as message attributes), delivered after `delay`
    /// (whole seconds, at most SQS's 15 minutes).
    async fn send(&self, message: QueueMessage, delay: Duration) -> Result<()> {
        let body = String::from_utf8(message.body)
            .map_err(|_| ServiceError::internal("job message body is not UTF-8"))?;
        let mut req = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body);
        if !delay.is_zero() {
            req = req.delay_seconds(delay.as_secs().clamp(1, 900) as i32);
        }
        for (name, value) in message.headers.iter().filter(|(_, v)| !v.is_empty()) {
            req = req.message_attributes(
                name,
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(value)
                    .build()
                    .map_err(|e| ServiceError::internal("bad message attribute").with_cause(e))?,
            );
        }
        req.send()
            .await
            .map_err(|e| ServiceError::unavailable("job queue unavailable").with_cause(e))?;
        Ok(())
    }
}

impl JobQueue for SqsJobQueue {
    fn enqueue<'a>(&'a self, message: QueueMessage) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.send(message, Duration::ZERO))
    }

    fn enqueue_after<'a>(
        &'a self,
        message: QueueMessage,
        delay: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.send(message, delay))
    }

    /// The queue's approximate counts summed: waiting, in flight (received, not yet
    /// deleted) and delayed.
    fn depth(&self) -> BoxFuture<'_, Result<Option<u64>>> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        Box::pin(async move {
            let out = self
                .client
                .get_queue_attributes()
                .queue_url(&self.queue_url)
                .attribute_names(A::ApproximateNumberOfMessages)
                .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
                .attribute_names(A::ApproximateNumberOfMessagesDelayed)
                .send()
                .await
                .map_err(|e| ServiceError::unavailable("job queue unavailable").with_cause(e))?;
            let attrs = out.attributes();
            let count = |a: A| {
                attrs
                    .and_then(|m| m.get(&a))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            Ok(Some(
                count(A::ApproximateNumberOfMessages)
                    + count(A::ApproximateNumberOfMessagesNotVisible)
                    + count(A::ApproximateNumberOfMessagesDelayed),
            ))
        })
    }
}

/// A queue message from an SQS record's body and its string message attributes (Lambda
/// event records, or `ReceiveMessage` results).
pub fn queue_message<'a>(
    body: &str,
    attributes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> QueueMessage {
    let headers: BTreeMap<String, String> = attributes
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned())))
        .collect();
    QueueMessage {
        headers,
        body: body.as_bytes().to_vec(),
    }
}

/// A queue message from one record of a Lambda SQS event.
pub fn queue_message_from_record(record: &aws_lambda_events::sqs::SqsMessage) -> QueueMessage {
    let attrs = record
        .message_attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.string_value.as_deref()));
    queue_message(record.body.as_deref().unwrap_or(""), attrs)
}

/// A queue message from a `ReceiveMessage` result (tests and tools).
pub fn queue_message_from_sdk(m: &aws_sdk_sqs::types::Message) -> QueueMessage {
    let attrs = m
        .message_attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.string_value()));
    queue_message(m.body().unwrap_or(""), attrs)
}
