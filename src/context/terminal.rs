//! Asking a human on the terminal: the CLI's [`HumanPrompt`].
//!
//! The question goes to stderr (stdout carries only results); the answer is
//! one line read from stdin, which may be a terminal or a pipe
//! (`echo yes | toolpool call call_user ...`). When stdin carries something
//! else (`call --args-file -`), answers are read from `/dev/tty` instead.
//! Prompts from concurrent calls are asked one at a time.
//!
//! Lines are read on a thread of their own: a blocking read cannot be
//! cancelled, and that thread must not keep the runtime from shutting down.

use std::io::{BufRead, Write};
use std::sync::mpsc;

use tokio::sync::{oneshot, Mutex};

use super::{BoxFuture, HumanPrompt, PromptAnswer, PromptError, PromptRequest};

/// Where a [`TerminalPrompt`] reads its answers from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptInput {
    /// The process's stdin (a terminal or a pipe).
    Stdin,
    /// The controlling terminal, `/dev/tty` (when stdin is used for something else).
    Terminal,
}

type LineReply = oneshot::Sender<Result<Option<String>, String>>;

/// Asks on the terminal; see the module docs.
pub struct TerminalPrompt {
    input: PromptInput,
    /// Requests for one line each, to the reader thread (started on first use).
    reader: Mutex<Option<mpsc::Sender<LineReply>>>,
}

impl TerminalPrompt {
    /// A prompt that asks on stderr and reads answers from `input`; nothing
    /// is read until the first question.
    pub fn new(input: PromptInput) -> TerminalPrompt {
        TerminalPrompt {
            input,
            reader: Mutex::new(None),
        }
    }

    async fn ask(&self, request: PromptRequest) -> Result<PromptAnswer, PromptError> {
        // Held until the answer is in: one question at a time.
        let mut reader = self.reader.lock().await;
        let lines = match reader.as_ref() {
            Some(lines) => lines.clone(),
            None => {
                let lines = spawn_reader(self.input)?;
                *reader = Some(lines.clone());
                lines
            }
        };
        self.show(&request.display_text());
        let (reply, answer) = oneshot::channel();
        lines
            .send(reply)
            .map_err(|_| PromptError::Failed("the terminal reader stopped".into()))?;
        match answer.await {
            Ok(Ok(Some(line))) => Ok(PromptAnswer::text(line)),
            Ok(Ok(None)) => Err(PromptError::Unavailable(match self.input {
                PromptInput::Stdin => "no input: standard input is at its end; pipe the answer in \
                                       (e.g. `echo yes | toolpool call ...`) or run on a terminal"
                    .into(),
                PromptInput::Terminal => "no input: the terminal is at its end".into(),
            })),
            Ok(Err(e)) => Err(PromptError::Unavailable(e)),
            Err(_) => Err(PromptError::Failed("the terminal reader stopped".into())),
        }
    }

    fn show(&self, text: &str) {
        if self.input == PromptInput::Terminal {
            if let Ok(mut tty) = std::fs::OpenOptions::new().write(true).open("/dev/tty") {
                if tty.write_all(text.as_bytes()).is_ok() {
                    let _ = tty.flush();
                    return;
                }
            }
        }
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(text.as_bytes());
        let _ = stderr.flush();
    }
}

impl HumanPrompt for TerminalPrompt {
    fn request(&self, request: PromptRequest) -> BoxFuture<'_, Result<PromptAnswer, PromptError>> {
        Box::pin(self.ask(request))
    }
}

/// Starts the thread that reads one line per request.
fn spawn_reader(input: PromptInput) -> Result<mpsc::Sender<LineReply>, PromptError> {
    let mut source: Box<dyn BufRead + Send> = match input {
        PromptInput::Stdin => Box::new(std::io::BufReader::new(std::io::stdin())),
        PromptInput::Terminal => {
            let tty = std::fs::File::open("/dev/tty").map_err(|e| {
                PromptError::Unavailable(format!(
                    "no terminal to ask on (/dev/tty: {e}); stdin carries the arguments"
                ))
            })?;
            Box::new(std::io::BufReader::new(tty))
        }
    };
    let (lines, requests) = mpsc::channel::<LineReply>();
    std::thread::Builder::new()
        .name("toolpool-prompt".into())
        .spawn(move || {
            for reply in requests {
                let mut line = String::new();
                let result = match source.read_line(&mut line) {
                    Ok(0) => Ok(None),
                    Ok(_) => {
                        let end = line.trim_end_matches(['\n', '\r']).len();
                        line.truncate(end);
                        Ok(Some(line))
                    }
                    Err(e) => Err(format!("cannot read the answer: {e}")),
                };
                // A requester that went away (its call ended) drops the line.
                let _ = reply.send(result);
            }
        })
        .map_err(|e| PromptError::Failed(format!("cannot start the terminal reader: {e}")))?;
    Ok(lines)
}
