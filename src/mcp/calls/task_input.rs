//! Questions a task's tool asks a human (SEP-2663): while one is open the
//! task is `input_required`, `tasks/get` shows it under `inputRequests` (an
//! elicitation request, keyed as in a multi-round-trip result), and the
//! client answers through `tasks/update`; the tool gets the answer and the
//! task works on. Questions are answered one key at a time, in any order.

use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::model::{InputRequests, InputResponses};
use tokio::sync::oneshot;

use super::mrtr::{self, Answer};
use crate::context::PromptRequest;

/// One open question: what the client is shown, and where the answer goes.
struct Open {
    request: rmcp::model::InputRequest,
    /// The form its answer must fit.
    form: rmcp::model::ElicitationSchema,
    answer: oneshot::Sender<Answer>,
}

/// The open questions of one task's call.
#[derive(Default)]
pub(crate) struct Questions {
    open: Mutex<HashMap<String, Open>>,
}

impl Questions {
    /// Opens `request`'s question, whose answer goes to `answer`; returns
    /// its key (the tool's `input_key`, made unique among the open ones).
    pub(in crate::mcp) fn open(
        &self,
        request: &PromptRequest,
        answer: oneshot::Sender<Answer>,
    ) -> String {
        let mut open = self.lock();
        let base = mrtr::input_key(request);
        let mut key = base.clone();
        let mut n = 1;
        while open.contains_key(&key) {
            n += 1;
            key = format!("{base}-{n}");
        }
        let (input, form) = mrtr::input_request(request);
        let question = Open {
            request: input,
            form,
            answer,
        };
        open.insert(key.clone(), question);
        key
    }

    /// The input requests still unanswered (empty: the task works). A
    /// question nobody waits for any more (its call ended) is dropped.
    pub(crate) fn pending(&self) -> InputRequests {
        let mut open = self.lock();
        open.retain(|_, question| !question.answer.is_closed());
        open.iter()
            .map(|(key, open)| (key.clone(), open.request.clone()))
            .collect()
    }

    /// Hands each response to the question of its key; keys no question has
    /// (any more) are ignored, as MCP has it for unknown information.
    pub(crate) fn answer(&self, responses: &InputResponses) {
        let mut open = self.lock();
        for (key, response) in responses {
            if let Some(question) = open.remove(key) {
                let answer = mrtr::answer_of(key, Some(response), &question.form);
                let _ = question.answer.send(answer);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        match self.open.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
